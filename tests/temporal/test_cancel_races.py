"""Issue 11 items 1, 2 and 5 on the Temporal executor (the in-process twins are in
tests/test_cancel_races.py).

A write is held open after it reached the store (:class:`GatedStore`, a slow ``fsync``) and the
run is cancelled inside that window: the workflow must record the write with its receipt and only
then store what the cancellation leaves, so the store holds one chain that equals the handle's
log. A run started while the handle's append commits chains from the appended entry. A tool
result the store refuses as too large is answered with a stored failure and the run goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from durable_agent import Agent, MessageEntry, RunCancelledError, RunStream, new, tool
from durable_agent.activities import AgentActivities
from durable_agent.ai import Reply, ScriptedModel
from durable_agent.session import Entry, encode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import WORKFLOWS, AgentSpec, ensure_search_attribute, run_workflow_id
from durable_agent.workflows.worker import workflow_runner
from tests.durable_runs.test_approvals import shape
from tests.durable_runs.test_steering import queued
from tests.support.gate_tool import GateTool
from tests.support.gated_store import GatedStore, has_role, has_text
from tests.support.late_store import LateStore, is_user
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    Outcome,
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    event_types,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


def texts(entries: Sequence[Entry]) -> list[str]:
    return [m.text() for m in messages_of(entries)]


async def cancel_requested(client: Client, session_id: str, rid: str) -> None:
    """Until the run's history records the cancel request."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, rid))

    async def probe() -> bool:
        history = await handle.fetch_history()
        return "EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED" in event_types(history.to_json())

    await eventually(probe, within=20, what="the cancel request")


async def cancel_inside_held_write(
    client: Client, gated: GatedStore, agent: Agent, stream: RunStream, rid: str
) -> Outcome:
    """Cancel while the held write is open; let it return once the workflow has the request."""
    seen = asyncio.ensure_future(consume(stream))
    await asyncio.wait_for(gated.entered.wait(), 30)
    cancelling = asyncio.ensure_future(stream.cancel())
    await cancel_requested(client, agent.session_id, rid)
    gated.release.set()
    await asyncio.wait_for(cancelling, 30)
    return await asyncio.wait_for(seen, 30)


async def cancelled_in_write(
    client: Client, held: str, spec: AgentSpec, name: str, question: str
) -> tuple[Agent, Outcome, list[Entry]]:
    """A run of ``spec`` asked ``question``, cancelled while its first write of a ``held``
    message is open; its outcome and what the store holds (one chain: :func:`check_one_chain`)."""
    memory = MemoryStore()
    gated = GatedStore(memory)
    gated.arm(has_role(held))
    q = queue()
    async with running_worker(client, gated, {"a": spec}, task_queue=q):
        agent = await new("a", store=memory, session_id=sid(name), executor=executor(client, q))
        rid = run_id()
        stream = await agent.run(question, run_id=rid)
        outcome = await cancel_inside_held_write(client, gated, agent, stream, rid)
    return agent, outcome, await check_one_chain(client, agent, rid, outcome)


async def check_one_chain(client: Client, agent: Agent, rid: str, outcome: Outcome) -> list[Entry]:
    """Cancelled; the store holds one chain, equal to the handle's log, every receipt stored."""
    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    await assert_replays(client, run_workflow_id(agent.session_id, rid))
    stored = await agent.store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [encode_entry(e) for e in agent.entries()] == [encode_entry(e) for e in stored]
    assert agent.leaf_id == stored[-1].id
    return stored


async def test_cancel_while_the_reply_is_written_keeps_one_reply(temporal_client: Client) -> None:
    spec = AgentSpec(model=ScriptedModel(["the whole reply"]))
    _, outcome, stored = await cancelled_in_write(
        temporal_client, "assistant", spec, "t-reply", "q"
    )
    assert texts(stored) == ["q", "the whole reply"]  # no aborted copy beside it
    assert messages_of(stored)[1].stop_reason != "aborted"
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]


async def test_cancel_while_a_tool_result_is_written_keeps_the_real_result(
    temporal_client: Client,
) -> None:
    spec = AgentSpec(
        model=ScriptedModel([Reply.call("echo", {"text": "x"}, id="c1"), "unused"]), tools=[echo]
    )
    _, _, stored = await cancelled_in_write(temporal_client, "tool_result", spec, "t-result", "go")
    # the tool ran: its result is the active path's answer, with no "cancelled" twin
    assert texts(stored) == ["go", "", "echo: x"]
    results = [m for m in messages_of(stored) if m.role == "tool_result"]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("c1", False)]


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves it first)."""
    return f"sent to {to}"


async def test_cancel_while_a_reply_that_asks_for_approval_is_written(
    temporal_client: Client,
) -> None:
    """The model call stores the reply with its approval request; a cancellation that arrives
    meanwhile still records the request before it answers the call, so the cancelled result
    chains from the request (it was once stored as the reply's second child, the request left
    on a branch of its own and the handle's log without the result)."""
    spec = AgentSpec(
        model=ScriptedModel([Reply.call("send_email", {"to": "bob"}, id="c1")]),
        tools=[send_email],
    )
    agent, _, stored = await cancelled_in_write(
        temporal_client, "assistant", spec, "t-ask", "mail bob"
    )
    assert shape(stored) == ["user", "assistant", "approval_request", "tool_result"]
    assert texts(stored)[-1] == "tool execution cancelled"
    assert agent.pending_approvals() == []


@pytest.mark.parametrize("held", ["assistant", "tool_result"])
async def test_a_cancel_that_arrives_with_the_stored_answer_keeps_it(
    temporal_client: Client, held: str
) -> None:
    """The run's cancellation and a producer's answer reach the workflow in the same activation
    (its workflow worker was away while both happened): the answer, already stored, still gets
    its receipt; the SDK raises the cancellation over a completed activity that is awaited
    directly, which once left a stored result without one, or beside a cancelled twin."""
    memory = MemoryStore()
    gated = GatedStore(memory)
    gated.arm(has_role(held))
    q = queue()
    spec = AgentSpec(
        model=ScriptedModel([Reply.call("echo", {"text": "x"}, id="c1"), "unused"]), tools=[echo]
    )
    await ensure_search_attribute(temporal_client)
    registered = AgentActivities(gated, {"a": spec}).all()
    activities = Worker(
        temporal_client,
        task_queue=q,
        activities=registered,
        max_heartbeat_throttle_interval=timedelta(seconds=0.5),
    )

    def workflows() -> Worker:
        """Workflow tasks and the run's local store steps, no model or tool call."""
        return Worker(
            temporal_client,
            task_queue=q,
            workflows=WORKFLOWS,
            activities=registered,
            no_remote_activities=True,
            workflow_runner=workflow_runner(True),
            workflow_failure_exception_types=[Exception],
            max_cached_workflows=0,
        )

    async with activities:
        agent = await new(
            "a",
            store=memory,
            session_id=sid(f"t-with-{held}"),
            executor=executor(temporal_client, q),
        )
        rid = run_id()
        async with workflows():
            stream = await agent.run("go", run_id=rid)
            seen = asyncio.ensure_future(consume(stream))
            await asyncio.wait_for(gated.entered.wait(), 30)
        # no workflow worker now: the cancel request and the answer wait in history, together
        cancelling = asyncio.ensure_future(stream.cancel())
        await cancel_requested(temporal_client, agent.session_id, rid)
        gated.release.set()
        handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))

        async def answered() -> bool:
            history = (await handle.fetch_history()).to_json()
            return event_types(history).count("EVENT_TYPE_ACTIVITY_TASK_COMPLETED") >= 1 + (
                held == "tool_result"
            )

        await eventually(answered, within=20, what="the held answer in history")
        async with workflows():
            # (a workflow task the stopped worker's last poll took is retried after its timeout)
            await asyncio.wait_for(cancelling, 90)
            outcome = await asyncio.wait_for(seen, 30)

    stored = await check_one_chain(temporal_client, agent, rid, outcome)
    if held == "assistant":  # the reply kept, its call then answered as cancelled
        assert texts(stored) == ["go", "", "tool execution cancelled"]
    else:  # the tool ran: its result answers the call, with no cancelled twin
        assert texts(stored) == ["go", "", "echo: x"]


async def test_cancel_while_a_steer_is_written_stores_each_queued_message_once(
    temporal_client: Client,
) -> None:
    """Two steers are due at a turn's end; the cancel lands while the first is written: it gets
    its receipt, the second is stored by the cancellation, each once and in the order received,
    under IDs a replay derives again (so a retried workflow task stores nothing twice)."""
    memory = MemoryStore()
    gated, gate = GatedStore(memory), GateTool()
    q = queue()
    spec = AgentSpec(
        model=ScriptedModel([Reply.call("gate", id="g1"), "unused"]), tools=[gate.tool]
    )
    async with running_worker(temporal_client, gated, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=memory, session_id=sid("t-steer"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        await asyncio.wait_for(gate.started.wait(), 30)
        sends = []
        for n, text in enumerate(("one", "two"), 1):  # one at a time: the order received is fixed
            sends.append(asyncio.ensure_future(stream.send(text)))
            await queued(agent, n, client=temporal_client)
        gated.arm(has_text("one"))
        gate.release.set()
        outcome = await cancel_inside_held_write(temporal_client, gated, agent, stream, rid)
        sent = [await asyncio.wait_for(s, 30) for s in sends]

    stored = await check_one_chain(temporal_client, agent, rid, outcome)
    assert texts(stored) == ["go", "", "opened", "one", "two"]
    assert [e.id for e in sent] == [e.id for e in stored[3:]]
    delivered = [e.entries for e in outcome.events if e.agent and e.agent.type == "input_delivered"]
    assert delivered == [[stored[3]], [stored[4]]]


@tool(approval=True)
async def approve_me(text: str) -> str:
    """Runs once a person approves it."""
    return text


async def test_a_retried_write_of_a_held_message_stores_it_once(temporal_client: Client) -> None:
    """The cancellation's write of a held message times out (the store applies it later) and
    its store step retries: the message is stored once, under the ID the run gave it."""
    memory = MemoryStore()
    late, q = LateStore(memory), queue()
    spec = AgentSpec(
        model=ScriptedModel([Reply.call("approve_me", {"text": "x"}, id="c1")]), tools=[approve_me]
    )
    async with running_worker(temporal_client, late, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=memory, session_id=sid("t-held"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.ensure_future(consume(stream))
        await wait_state(
            temporal_client, agent.session_id, rid, lambda s: bool(s.pending_approvals)
        )
        sending = asyncio.ensure_future(stream.send("and then?", when="at_end"))
        await queued(agent, 1, client=temporal_client)
        late.hold_next(is_user)
        await stream.cancel()
        outcome = await asyncio.wait_for(seen, 30)
        sent = await asyncio.wait_for(sending, 30)
        await late.land()  # the timed-out write is applied after the retry stored it

    stored = await check_one_chain(temporal_client, agent, rid, outcome)
    assert texts(stored) == ["go", "", "tool execution cancelled", "and then?"]
    assert stored[-1].id == sent.id


async def test_cancel_while_the_run_input_is_written_keeps_the_input(
    temporal_client: Client,
) -> None:
    memory = MemoryStore()
    gated = GatedStore(memory)
    gated.arm(has_text("the input"))
    q = queue()
    spec = AgentSpec(model=ScriptedModel(["unused"]))
    async with running_worker(temporal_client, gated, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=memory, session_id=sid("t-input"), executor=executor(temporal_client, q)
        )
        await agent.append("before")
        rid = run_id()
        stream = await agent.run("the input", run_id=rid)
        outcome = await cancel_inside_held_write(temporal_client, gated, agent, stream, rid)

    stored = await check_one_chain(temporal_client, agent, rid, outcome)
    assert texts(stored) == ["before", "the input"]
    assert outcome.events and outcome.events[0].entries == [stored[1]]
    (after,) = await agent.append("after")  # chains from the input, not beside it
    assert after.parent_id == stored[1].id


async def test_run_started_during_an_append_chains_from_the_appended_entry(
    temporal_client: Client,
) -> None:
    memory = MemoryStore()
    gated = GatedStore(memory)  # the handle's store; the worker writes to memory directly
    q = queue()
    spec = AgentSpec(model=ScriptedModel(["answer"]))
    async with running_worker(temporal_client, memory, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=gated, session_id=sid("t-append"), executor=executor(temporal_client, q)
        )
        await agent.append("first")
        gated.arm(has_text("appended"))
        appending = asyncio.ensure_future(agent.append("appended"))
        await gated.entered.wait()
        starting = asyncio.ensure_future(agent.run("question"))
        gated.release.set()
        (appended,) = await appending
        outcome = await asyncio.wait_for(consume(await starting), 30)

    assert outcome.error is None, repr(outcome.error)
    stored = await memory.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert texts(stored) == ["first", "appended", "question", "answer"]
    assert stored[2].parent_id == appended.id
    assert [encode_entry(e) for e in agent.entries()] == [encode_entry(e) for e in stored]


@tool
async def big() -> str:
    """Return more than the store takes in one entry (and less than a Temporal payload)."""
    return "x" * 20_000


async def test_oversized_tool_result_is_answered_with_a_failure_and_the_run_continues(
    temporal_client: Client,
) -> None:
    store = MemoryStore(max_entry_bytes=8_000)
    q = queue()
    spec = AgentSpec(model=ScriptedModel([Reply.call("big", id="b1"), "carried on"]), tools=[big])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("t-big"), executor=executor(temporal_client, q)
        )
        outcome = await asyncio.wait_for(consume(await agent.run("go")), 30)

    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    result = stored[2]
    assert isinstance(result, MessageEntry) and result.message.role == "tool_result"
    assert result.message.tool_call_id == "b1" and result.message.is_error
    assert result.message.text().startswith("tool execution failed: EntryTooLargeError: ")
    assert texts(stored)[-1] == "carried on"
    assert_receipts_stored(outcome, stored)
