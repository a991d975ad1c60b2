"""A decision reaches its approved tool within the workflow task it arrives in
(docs/design.md#approvals-and-steering): the ``decide`` update is accepted, the decision is
committed (a local activity, inside that task), the update answers the stored entry and the
tool's activity is scheduled, all in one workflow task completion. Decision -> tool start so
costs one update round trip plus the commit; nothing waits for another workflow task, and the
update never answers before the decision is stored, even when its worker dies between the two."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from durable_agent import ApprovalDecision
from durable_agent.ai import Reply
from durable_agent.session.approvals import ApprovalRequest
from durable_agent.session.codec import encode_entry
from durable_agent.stores import FileStore
from durable_agent.workflows import RunResult, run_workflow_id
from tests.durable_runs.test_approvals import DECIDED_TURN, SENT, Reader, email, shape, stored
from tests.support.worker_process import AGENT, CALLS_LOG, MARKERS
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    assert_one_chain,
    assert_replays,
    queue,
    run_id,
    sid,
    wait_for_file,
)
from tests.temporal.test_approvals import agent_on

pytestmark = pytest.mark.temporal

WORKFLOW_TASK = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
}


async def events_of(client: Client, workflow_id: str) -> list[HistoryEvent]:
    return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)


def first(events: list[HistoryEvent], kind: int, after: int = 0) -> int:
    return next(i for i in range(after, len(events)) if events[i].event_type == kind)


async def until_waiting(client: Client, workflow_id: str) -> None:
    """Until the run waits: the workflow task that started its wait (its timer) is complete
    (each look is a history read, a server round trip)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        kinds = [e.event_type for e in await events_of(client, workflow_id)]
        if EventType.EVENT_TYPE_TIMER_STARTED in kinds:
            return
    raise AssertionError("the wait's timer never started")


async def test_decision_commit_and_tool_schedule_share_the_updates_workflow_task(
    temporal_client: Client,
) -> None:
    SENT.clear()
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        wid = run_workflow_id(agent.session_id, stream.run_id)
        await until_waiting(temporal_client, wid)
        decision = await agent.decide("c1", True)
        await reader.done()
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]  # the approved call ran, once
    assert isinstance(decision, ApprovalDecision)
    assert [e for e in stored(agent) if isinstance(e, ApprovalDecision)] == [decision]
    events = await events_of(temporal_client, wid)
    accepted = first(events, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    answered = first(events, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED, accepted)
    scheduled = first(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, accepted)
    tool = events[scheduled].activity_task_scheduled_event_attributes.activity_type.name
    assert tool == "durable_agent.call_tool"
    # the update arrived in the task that completed just before it was accepted ...
    assert events[accepted - 1].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    # ... and that one task committed the decision, answered, and scheduled the tool
    between = [e.event_type for e in events[accepted : scheduled + 1]]
    assert not WORKFLOW_TASK & set(between), between
    commits = [
        i
        for i in range(accepted, answered)
        if events[i].event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert len(commits) == 1, between  # the decision's commit, before the update's answer
    assert answered < scheduled


async def test_a_decision_stored_by_a_worker_that_died_is_the_updates_answer(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """The worker stores the decision (the update's local commit) and dies before its workflow
    task completes: nobody was told. Another worker runs the task again; its commit finds the
    stored decision, which is what the update answers: one decision, the tool run once."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    common += ["--root", str(root), "--steps", "1", "--approval"]
    first = worker_processes.start(*common, "--crash", "decision-committed")
    await wait_for_file(markers / f"ready-{first.pid}")
    session = sid("decision-rerun")
    wid = run_workflow_id(session, run_id())
    handle = await temporal_client.start_workflow(
        "durable_agent.run",
        {"session_id": session, "agent": AGENT, "text": "go"},
        id=wid,
        task_queue=q,
        task_timeout=timedelta(seconds=2),  # the dead worker's task is given up quickly
        execution_timeout=timedelta(seconds=60),
        result_type=RunResult,
    )
    await until_waiting(temporal_client, wid)
    store = FileStore(root)
    (request,) = [e for e in await store.load_entries(session) if isinstance(e, ApprovalRequest)]
    call = request.tool_call_id
    updating = asyncio.ensure_future(
        handle.execute_update(
            "decide", {"tool_call_id": call, "approved": True}, id=f"decide:{call}", result_type=str
        )
    )
    await wait_for_file(markers / MARKERS["decision-committed"])
    (decision,) = [e for e in await store.load_entries(session) if isinstance(e, ApprovalDecision)]
    assert not updating.done()  # stored, and nobody told yet
    worker_processes.kill(first)
    worker_processes.start(*common)
    assert await asyncio.wait_for(updating, 60) == encode_entry(decision)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == "completed"
    entries = await store.load_entries(session)
    assert_one_chain(entries)
    assert shape(entries) == DECIDED_TURN
    assert entries[3] == decision
    assert (markers / CALLS_LOG).read_text().split().count("tool") == 1  # the step ran once
    await assert_replays(temporal_client, wid)
