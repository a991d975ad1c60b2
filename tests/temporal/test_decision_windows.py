"""A decision that arrives at the edge of a run's wait, on Temporal
(docs/design.md#approvals-and-steering): the model call stores a reply with its approval
requests before the workflow has processed the call's result, so a client sees the request
pending while the run does not wait for it yet. The store holds that append open (a slow write)
for as long as the test needs the window."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError

from durable_agent import Agent, ApprovalDecision, ApprovalRequest, Entry, ScriptedModel, new
from durable_agent.ai import Reply, ToolCall
from durable_agent.durable.stream import RunStream
from durable_agent.session import decode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from durable_agent.workflows.mail_client import decide_update_id
from tests.durable_runs.test_approvals import (
    SENT,
    Reader,
    email,
    lookup,
    send_email,
    shape,
    stored,
)
from tests.support.gated_store import GatedStore, has_role, has_text
from tests.support.temporal import running_worker
from tests.temporal.helpers import assert_replays, executor, queue

pytestmark = pytest.mark.temporal


def requests(call_id: str) -> Any:
    """A batch holding the approval request of ``call_id`` (the model call's append)."""

    def match(entries: Sequence[Entry]) -> bool:
        return any(isinstance(e, ApprovalRequest) and e.tool_call_id == call_id for e in entries)

    return match


@contextlib.asynccontextmanager
async def gated_agent(
    client: Client, script: list[Any], tools: tuple[Any, ...] = (send_email,)
) -> AsyncIterator[tuple[Agent, GatedStore]]:
    store = GatedStore(MemoryStore())
    q = queue()
    agents = {"a": AgentSpec(model=ScriptedModel(script), tools=tools)}
    async with running_worker(client, store, agents, task_queue=q):
        agent = await new("a", store=store, executor=executor(client, q))
        try:
            yield agent, store
        finally:
            store.release.set()  # a failed test leaves no write held: the worker stops


async def decide_in_the_window(
    client: Client, agent: Agent, run_id: str, store: GatedStore, call_id: str
) -> ApprovalDecision:
    """With the model call's append of ``call_id``'s request stored and held open (the workflow
    has not had the call's result), a decision by plain update is accepted; then the run goes
    on and takes it."""
    await asyncio.wait_for(store.entered.wait(), 30)
    handle = client.get_workflow_handle(run_workflow_id(agent.session_id, run_id))
    body = {"tool_call_id": call_id, "approved": True, "decided_by": "ops"}
    asked = [
        e for e in await store.load_entries(agent.session_id) if isinstance(e, ApprovalRequest)
    ]
    request_id = [e.id for e in asked if e.tool_call_id == call_id][-1]
    try:
        update = await handle.start_update(
            "decide",
            body,
            id=decide_update_id(call_id, request_id),  # as a client sends it
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=str,
        )
    finally:
        store.release.set()
    entry = decode_entry(await asyncio.wait_for(update.result(), 30))
    assert isinstance(entry, ApprovalDecision) and entry.tool_call_id == call_id
    return entry


TWO_MAILS = [
    Reply(tool_calls=[email("c1")]),
    Reply(tool_calls=[email("c2", "carol@example.com")]),
    "both sent",
]
"""A run that waits twice: for the approval of ``c1``, then of ``c2``."""


async def _first_decided(agent: Agent, store: GatedStore) -> tuple[RunStream, Reader]:
    """``TWO_MAILS`` run with ``store`` armed to hold the request of ``c2``, and ``c1``
    approved: the run goes on to its second wait."""
    stream = await agent.run("mail bob, then carol")
    reader = Reader(stream)
    await reader.until("approval_requested")
    store.arm(requests("c2"))
    await agent.decide("c1", True)
    return stream, reader


async def test_a_decision_before_a_later_wait_is_taken(temporal_client: Client) -> None:
    """The run's second wait: its reply and request are stored (a client sees the call
    pending) while the run still holds its first, finished wait. A decision then is accepted
    and taken, not refused as 'not pending' (which left a library ``decide`` waiting for the run
    to park and an HTTP one stored beside a run that never saw it)."""
    SENT.clear()
    async with gated_agent(temporal_client, TWO_MAILS) as (agent, store):
        stream, reader = await _first_decided(agent, store)
        decision = await decide_in_the_window(temporal_client, agent, stream.run_id, store, "c2")
        await reader.done()
        assert [s["to"] for s in SENT] == ["bob@example.com", "carol@example.com"]
        decisions = [e for e in stored(agent) if isinstance(e, ApprovalDecision)]
        assert [d.tool_call_id for d in decisions] == ["c1", "c2"]
        assert decisions[1] == decision
        assert await agent.decide("c2", True, decided_by="ops") == decision  # a resend
        assert shape(stored(agent))[-4:] == [
            "approval_request",
            "approval_decision",
            "tool_result",
            "assistant",
        ]
        await assert_replays(temporal_client, run_workflow_id(agent.session_id, stream.run_id))


async def test_another_handles_decision_before_a_later_wait_is_taken(
    temporal_client: Client,
) -> None:
    """As the HTTP API decides: a handle that does not run the session (another process)
    reads the request from the store and decides in the window. The run takes the decision;
    it was stored beside the run instead (the run waited for it until ``approval_wait``)."""
    SENT.clear()
    async with gated_agent(temporal_client, TWO_MAILS) as (agent, store):
        stream, reader = await _first_decided(agent, store)
        await asyncio.wait_for(store.entered.wait(), 30)
        # deciding needs no worker of its own: any queue
        elsewhere = executor(temporal_client, queue())
        other = await new("a", store=store, session_id=agent.session_id, executor=elsewhere)
        assert [p.tool_call_id for p in other.pending_approvals()] == ["c2"]
        deciding = asyncio.ensure_future(other.decide("c2", True, decided_by="ops"))
        # the same update (its ID): accepted in the window, whichever of the two came first
        decision = await decide_in_the_window(temporal_client, agent, stream.run_id, store, "c2")
        assert await asyncio.wait_for(deciding, 30) == decision
        await reader.done()
        assert [s["to"] for s in SENT] == ["bob@example.com", "carol@example.com"]
        assert shape(stored(agent))[-3:] == ["approval_decision", "tool_result", "assistant"]


async def test_a_decision_before_the_first_wait_is_taken(temporal_client: Client) -> None:
    """The same window on the run's first wait."""
    SENT.clear()
    script = [Reply(tool_calls=[email("c1")]), "sent"]
    async with gated_agent(temporal_client, script) as (agent, store):
        store.arm(requests("c1"))
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await decide_in_the_window(temporal_client, agent, stream.run_id, store, "c1")
        await reader.done()
        assert [s["to"] for s in SENT] == ["bob@example.com"]
        assert shape(stored(agent))[2:4] == ["approval_request", "approval_decision"]


async def refused_at_once(handle: Any, body: dict[str, Any], update_id: str) -> None:
    """Send ``decide``; the validator refuses it (an accepted one would wait for the run, held
    by the store: the bound turns that into a failure, not a hang)."""
    await asyncio.wait_for(handle.execute_update("decide", body, id=update_id), 10)


def refusal_of(update_error: WorkflowUpdateFailedError) -> tuple[str, str]:
    cause = update_error.cause
    assert isinstance(cause, ApplicationError), cause
    return cause.type or "", cause.message


async def test_a_decision_the_run_will_not_ask_for_is_refused_when_it_can_know(
    temporal_client: Client,
) -> None:
    """A decision on a call the run never asks about: refused by the validator (no history)
    while the run runs tools; taken while a model call is in flight (its reply may ask for it)
    and refused as not pending once that reply is processed, not held until the run ends and
    refused then as 'the run ended'."""
    calls = [ToolCall(id="l1", name="lookup", arguments={"name": "bob"})]
    script = [Reply(tool_calls=calls), "found him"]
    async with gated_agent(temporal_client, script, (send_email, lookup)) as (agent, store):
        store.arm(has_role("tool_result"))
        stream = await agent.run("look bob up")
        reader = Reader(stream)
        await asyncio.wait_for(store.entered.wait(), 30)  # the tool's result, held
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        with pytest.raises(WorkflowUpdateFailedError) as running_tools:
            await refused_at_once(handle, {"tool_call_id": "nope", "approved": True}, "decide:nope")
        assert refusal_of(running_tools.value)[0] == "ApprovalNotPendingError"
        assert "'nope' is not pending" in refusal_of(running_tools.value)[1]
        for call_id in ("l1", "c9"):  # a call that asked nothing, and one that does not exist
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await refused_at_once(
                    handle, {"tool_call_id": call_id, "approved": True}, f"d:{call_id}"
                )
            assert refusal_of(refused.value)[0] == "ApprovalNotPendingError"
        store.entered.clear()
        store.arm(has_text("found him"))
        await store.let_go()  # the tool's result goes through
        await asyncio.wait_for(store.entered.wait(), 30)
        # the last reply is stored (with no request) and held: the run cannot know it yet
        update = await handle.start_update(
            "decide",
            {"tool_call_id": "nope", "approved": True},
            id="decide:nope-2",
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=str,
        )
        store.release.set()
        with pytest.raises(WorkflowUpdateFailedError) as not_asked:
            await asyncio.wait_for(update.result(), 30)
        kind, text = refusal_of(not_asked.value)
        assert kind == "ApprovalNotPendingError" and "'nope' is not pending" in text
        await reader.done()
        assert [e for e in stored(agent) if isinstance(e, ApprovalDecision)] == []


async def test_a_decided_call_is_refused_naming_its_decision(temporal_client: Client) -> None:
    """After the wait: a decision on the call decided in it is refused naming the stored
    decision, whether the run runs the call's tool or calls the model again."""
    script = [Reply(tool_calls=[email("c1")]), "sent"]
    async with gated_agent(temporal_client, script) as (agent, store):
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        store.arm(has_role("tool_result"))
        decision = await agent.decide("c1", True)
        await asyncio.wait_for(store.entered.wait(), 30)
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        body = {"tool_call_id": "c1", "approved": False}
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await refused_at_once(handle, body, "by-hand-1")
        assert decision.id in refusal_of(refused.value)[1]
        store.entered.clear()
        store.arm(has_text("sent"))
        await store.let_go()
        await asyncio.wait_for(store.entered.wait(), 30)  # the last reply, held: the run cannot end
        with pytest.raises(WorkflowUpdateFailedError) as in_flight:
            await refused_at_once(handle, body, "by-hand-2")
        assert decision.id in refusal_of(in_flight.value)[1]
        store.release.set()
        await reader.done()


async def test_a_call_decided_in_an_earlier_wait_is_refused_naming_its_decision(
    temporal_client: Client,
) -> None:
    """A decision by hand, while a model call is in flight, on a call decided in the run's
    first of two waits: taken (the reply may ask anything), then refused once the reply is
    processed naming the stored decision, as one on the last wait's call is; it said only
    'not pending a decision in this run'."""
    script = [Reply(tool_calls=[email("c1")]), Reply(tool_calls=[email("c2", "amy@x.org")]), "ok"]
    async with gated_agent(temporal_client, script) as (agent, store):
        stream = await agent.run("mail bob, then amy")
        reader = Reader(stream)
        await reader.until("approval_requested")
        first = await agent.decide("c1", True)
        await reader.until("approval_requested", 2)
        store.arm(has_text("ok"))
        await agent.decide("c2", True)
        await asyncio.wait_for(store.entered.wait(), 30)  # the last reply, held: in flight
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        update = await handle.start_update(
            "decide",
            {"tool_call_id": "c1", "approved": False},
            id="by-hand",
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=str,
        )
        store.release.set()
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await asyncio.wait_for(update.result(), 30)
        kind, text = refusal_of(refused.value)
        assert kind == "ApprovalNotPendingError" and first.id in text, text
        await reader.done()
