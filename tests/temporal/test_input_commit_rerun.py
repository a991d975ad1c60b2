"""A workflow task re-run after its worker died re-commits the run's input: the stored one wins.

The input and repair commit is a local activity inside the run's workflow task. A worker killed
after that write but before the task completed leaves the entries stored and the task to run
again on another worker, with the same entry IDs (the run's random source is seeded once) but
another ``workflow.now()``: the same entries with other ``created_at``. Found by
``test_worker_kill_under_load``: the re-run's append raised ``EntryConflictError`` and
the run failed. Now ``append_entries`` answers the stored times, which the workflow adopts.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_agent import ScriptedModel
from durable_agent.activities import AgentActivities
from durable_agent.activities.contracts import AppendInput
from durable_agent.ai import Message, TextContent
from durable_agent.ai.timefmt import format_time, utc_now
from durable_agent.session import MessageEntry
from durable_agent.session.codec import encode_entry
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, RunResult, run_workflow_id
from tests.support.worker_process import AGENT, MARKERS
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    assert_one_chain,
    messages_of,
    queue,
    run_id,
    sid,
    wait_for_file,
)


def user(eid: str, parent: str | None, text: str, at_offset: float) -> MessageEntry:
    at = utc_now() + timedelta(seconds=at_offset)
    return MessageEntry(
        id=eid,
        parent_id=parent,
        created_at=at,
        message=Message(role="user", content=[TextContent(text=text)], timestamp=at),
    )


async def test_a_rerun_commit_of_stored_input_answers_the_stored_times() -> None:
    store = MemoryStore()
    await store.create_session("s1")
    first_try = user("in1", None, "question", 0)
    await store.append_entries("s1", [first_try])  # the dead worker's write
    activities = AgentActivities(store, {"a": AgentSpec(model=ScriptedModel([]))})
    rerun = [user("in1", None, "question", 10), user("in2", "in1", "more", 10)]
    result = await ActivityEnvironment().run(
        activities.append_entries,
        AppendInput(session_id="s1", entries=[encode_entry(e) for e in rerun]),
    )
    assert result.times[0].created_at == format_time(first_try.created_at)
    assert result.times[0].timestamp == format_time(first_try.created_at)
    assert result.times[1].created_at == format_time(rerun[1].created_at)
    stored = await store.load_entries("s1")
    assert [encode_entry(e) for e in stored] == [encode_entry(first_try), encode_entry(rerun[1])]


async def test_other_content_under_a_stored_id_is_still_a_conflict() -> None:
    store = MemoryStore()
    await store.create_session("s1")
    await store.append_entries("s1", [user("in1", None, "question", 0)])
    activities = AgentActivities(store, {"a": AgentSpec(model=ScriptedModel([]))})
    rerun = [user("in1", None, "another question", 10), user("in2", "in1", "more", 10)]
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(
            activities.append_entries,
            AppendInput(session_id="s1", entries=[encode_entry(e) for e in rerun]),
        )
    assert caught.value.type == "EntryConflictError"
    assert [e.id for e in await store.load_entries("s1")] == ["in1"]


@pytest.mark.temporal
async def test_an_operator_run_without_a_leaf_rerun_after_its_input_was_stored_goes_on(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """Started as an operator does (no leaf, a plain ``text``): the first workflow task stores
    the input and its worker dies before the task completes. The re-run task finds the run's
    own input as the session's newest entry; the run starts from where it did, not from that."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = [
        "--address",
        address,
        "--task-queue",
        q,
        "--markers",
        str(markers),
        "--root",
        str(root),
    ]
    first = worker_processes.start(*common, "--crash", "input-committed")
    await wait_for_file(markers / f"ready-{first.pid}")
    session = sid("operator-rerun")
    handle = await temporal_client.start_workflow(
        "durable_agent.run",
        {"session_id": session, "agent": AGENT, "text": "go"},
        id=run_workflow_id(session, run_id()),
        task_queue=q,
        task_timeout=timedelta(seconds=2),
        execution_timeout=timedelta(seconds=60),
        result_type=RunResult,
    )
    await wait_for_file(markers / MARKERS["input-committed"])
    worker_processes.kill(first)
    worker_processes.start(*common)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    stored = await FileStore(root).load_entries(session)
    assert_one_chain(stored)
    assert [m.text() for m in messages_of(stored)][::5] == ["go", "finished: go"]
    assert result.new_entry_ids == [e.id for e in stored]
