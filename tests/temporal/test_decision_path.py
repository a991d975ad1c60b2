"""A decision reaches its approved tool within the workflow task it arrives in
(docs/design.md#approvals-and-steering): the ``decide`` update is accepted, the decision is
committed (a local activity, inside that task), the update answers the stored entry and the
tool's activity is scheduled, all in one workflow task completion. Decision -> tool start so
costs one update round trip plus the commit; nothing waits for another workflow task, and the
update never answers before the decision is stored."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from durable_agent import ApprovalDecision
from durable_agent.ai import Reply
from durable_agent.workflows import run_workflow_id
from tests.durable_runs.test_approvals import SENT, Reader, email, stored
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
        for _ in range(1000):  # the run waits: the task that started its wait is complete
            kinds = [e.event_type for e in await events_of(temporal_client, wid)]
            if EventType.EVENT_TYPE_TIMER_STARTED in kinds:
                break
        else:
            raise AssertionError("the wait's timer never started")
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
