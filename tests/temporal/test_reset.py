"""What an operator's ``temporal workflow reset`` of a run leaves in the session (issue 15 item 8).

A reset is a **retry of that run from the leaf it started at**: what the run stored before the
reset point stays, everything after it is produced again under fresh entry IDs (Temporal gives
the reset execution a new random seed), so the retry grows a sibling branch and the original
entries are untouched. The reset's entries are the session's newest, so a handle opened
afterwards resumes on the retried branch, as after ``/retry``. Resets go through the bundled
``temporal`` CLI, as an operator would run them.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent import Reply, ScriptedModel, new, text
from durable_agent.ai import ModelRequest
from durable_agent.session import Entry, MessageEntry, Store, encode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, RunResult, run_workflow_id
from durable_agent.workflows.types import InputEntry, RunInput
from tests.support.temporal import FAST, running_worker, temporal_binary
from tests.temporal.helpers import (
    RUN_TIMEOUT,
    assert_one_chain,
    assert_replays,
    consume,
    executor,
    queue,
    run_id,
    sid,
)

pytestmark = pytest.mark.temporal


def respond(request: ModelRequest) -> Reply:
    return Reply(text=f"answer to {request.messages[-1].text()}")


def _text(entry: Entry) -> str:
    assert isinstance(entry, MessageEntry)
    return entry.message.text()


def reset(client: Client, workflow_id: str, *how: str) -> None:
    """``temporal workflow reset`` against the test server, as an operator types it."""
    address = client.service_client.config.target_host
    done = subprocess.run(
        [
            temporal_binary("temporal"),
            "workflow",
            "reset",
            "--address",
            address,
            "--namespace",
            client.namespace,
            "--workflow-id",
            workflow_id,
            "--reason",
            "operator retry",
            *how,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def completed_task_ids(client: Client, workflow_id: str) -> list[int]:
    """Event IDs of the run's completed workflow tasks (the points a reset can go back to)."""
    handle = client.get_workflow_handle(workflow_id)
    return [
        event.event_id
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    ]


async def reset_result(client: Client, workflow_id: str) -> RunResult:
    """The reset execution's result (the handle follows the workflow ID to its newest run)."""
    handle = client.get_workflow_handle(workflow_id, result_type=RunResult)
    result: RunResult = await asyncio.wait_for(handle.result(), 30)
    return result


async def two_turns(client: Client, store: Store, q: str) -> tuple[str, str, list[Entry]]:
    """A session with q1 then q2 asked through the library; returns (session, run 1 ID, entries)."""
    agent = await new("a", store=store, session_id=sid("reset"), executor=executor(client, q))
    first = run_id()
    for question, rid in (("q1", first), ("q2", None)):
        outcome = await consume(await agent.run(question, run_id=rid))
        assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert [_text(e) for e in stored] == ["q1", "answer to q1", "q2", "answer to q2"]
    return agent.session_id, first, stored


async def test_reset_of_an_old_run_retries_it_as_a_sibling_branch(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        session, first, before = await two_turns(temporal_client, store, q)
        wid = run_workflow_id(session, first)
        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

        stored = await store.load_entries(session)
        # the original four entries are untouched, byte for byte, and come first
        assert [encode_entry(e) for e in stored[:4]] == [encode_entry(e) for e in before]
        retried = stored[4:]
        assert [_text(e) for e in retried] == ["q1", "answer to q1"]
        # a sibling of the original run's input: the same parent (run 1 started on the empty
        # leaf, so the retry is a second root), new IDs
        assert retried[0].parent_id == before[0].parent_id is None
        assert_one_chain(retried)
        assert {e.id for e in retried}.isdisjoint(e.id for e in before)
        assert result.status == "completed"
        assert result.new_entry_ids == [e.id for e in retried]
        assert result.leaf_id == retried[-1].id

        # the retried branch is the session's newest: a handle opened now resumes there
        reopened = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert reopened.leaf_id == retried[-1].id


async def test_reset_after_the_input_was_stored_answers_that_input_again(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        session, first, before = await two_turns(temporal_client, store, q)
        wid = run_workflow_id(session, first)
        # the workflow task that saw the input's append complete (and scheduled the model call)
        tasks = await completed_task_ids(temporal_client, wid)
        reset(temporal_client, wid, "--event-id", str(tasks[2]))
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

    stored = await store.load_entries(session)
    assert [encode_entry(e) for e in stored[:4]] == [encode_entry(e) for e in before]
    [again] = stored[4:]
    # what was stored before the reset point stays shared: a second answer to the same q1
    assert _text(again) == "answer to q1" and again.parent_id == before[0].id
    assert again.id != before[1].id
    assert result.new_entry_ids == [before[0].id, again.id]


async def test_reset_to_the_last_task_of_a_finished_run_stores_nothing(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        session, first, before = await two_turns(temporal_client, store, q)
        wid = run_workflow_id(session, first)
        reset(temporal_client, wid, "--type", "LastWorkflowTask")
        result = await reset_result(temporal_client, wid)

    assert [encode_entry(e) for e in await store.load_entries(session)] == [
        encode_entry(e) for e in before
    ]
    assert result.new_entry_ids == [before[0].id, before[1].id]
    assert len(lm.requests) == 2


async def test_reset_of_a_run_started_without_a_leaf_retries_from_where_it_started(
    temporal_client: Client,
) -> None:
    """A run started from the UI names no leaf (it continues the session's newest entry). Its
    reset must retry from the entry it continued then, not from whatever is newest now."""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    session = sid("reset-ui")
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        seed = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert (await consume(await seed.run("q0"))).error is None
        rid = run_id()
        wid = run_workflow_id(session, rid)
        await temporal_client.execute_workflow(
            "durable_agent.run",
            RunInput(
                session_id=session,
                run_id=rid,
                agent="a",
                leaf_id=None,
                inputs=[InputEntry.of(text("q1"), 0)],
                timeouts=FAST,
            ),
            id=wid,
            task_queue=q,
            result_type=RunResult,
            execution_timeout=RUN_TIMEOUT,
        )
        later = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert (await consume(await later.run("q2"))).error is None
        before = await store.load_entries(session)
        assert [_text(e) for e in before] == [
            "q0",
            "answer to q0",
            "q1",
            "answer to q1",
            "q2",
            "answer to q2",
        ]

        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

    stored = await store.load_entries(session)
    assert [encode_entry(e) for e in stored[:6]] == [encode_entry(e) for e in before]
    retried = stored[6:]
    assert [_text(e) for e in retried] == ["q1", "answer to q1"]
    # under q0's answer, where the run started, not under q2's answer (the newest entry now)
    assert retried[0].parent_id == before[1].id
    assert result.new_entry_ids == [e.id for e in retried]
    # the model saw the path the run started on: q0, its answer, q1
    assert [m.text() for m in lm.requests[-1].messages] == ["q0", "answer to q0", "q1"]
