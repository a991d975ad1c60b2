"""A run's events derived from its stored entries (``RunChain``) against the events the run
engine recorded in the workflow (its ``events`` query), for the scenario set: a plain reply, a
tool turn, parallel and sequential calls, a failing tool, a failing model, a turn limit, run-start
repairs, a run without input, continue-as-new, cancellation while the model streams (also with a
steer queued), while a tool runs, and while the run waits for approval with two messages queued
(docs/design.md#receipts). The client's own stream must show the same: same types, same
order, same receipts (live updates aside).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from durable_agent import (
    Agent,
    Event,
    MessageEntry,
    ModelError,
    Reply,
    RunStream,
    ScriptedModel,
    new,
)
from durable_agent.activities.run_contracts import EventsAnswer, RunResult, RunState
from durable_agent.ai import RetryPolicy, ToolCall, Usage, assistant_message, tool, user_message
from durable_agent.durable.chain_events import Outcome, RunChain
from durable_agent.durable.inbox import When
from durable_agent.session import Entry, SessionNotFoundError, encode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.polling import eventually
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, hydrate, queue, run_id, sid

pytestmark = pytest.mark.temporal


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


@tool(parallel_safe=False)
async def one_at_a_time(text: str) -> str:
    """Echo the text, never beside another call."""
    return f"alone: {text}"


@tool(retry=RetryPolicy(max_attempts=1))
async def broken(text: str) -> str:
    """Always fails."""
    raise RuntimeError(f"broken on {text}")


@tool(approval=True)
async def approve_me(text: str) -> str:
    """Runs once a person approves it."""
    return text


RUNNING: set[str] = set()
"""Arguments of the ``slow`` calls running now."""


@tool
async def slow(text: str) -> str:
    """Takes a while."""
    RUNNING.add(text)
    try:
        await asyncio.sleep(30)
    finally:
        RUNNING.discard(text)
    return text


def calls(*names: str) -> Reply:
    return Reply(
        text="calling",
        tool_calls=[
            ToolCall(id=f"c{i}", name=n, arguments={"text": f"t{i}"}) for i, n in enumerate(names)
        ],
    )


@dataclass
class Scenario:
    script: list[Reply | str]
    run: tuple[Any, ...] = ("go",)
    options: dict[str, Any] = field(default_factory=dict)
    before: list[Entry] = field(default_factory=list)
    can_every: int | None = None
    cancel: str | None = None
    """``update``: cancel at the first live update; ``tool``: at the first tool start;
    ``approval``: at the approval request."""
    send: list[tuple[str, When]] = field(default_factory=list)
    """Messages (text, when) sent into the run just before the cancel, held when it lands."""
    edit: dict[str, Any] | None = None
    """At the approval request, approve every pending call with these arguments."""


SLOW_REPLY = Reply(text="a long reply that streams slowly " * 8, chunk_size=4, chunk_delay=0.05)

SCENARIOS = {
    "reply": Scenario(["hello"]),
    "tool turn": Scenario([calls("echo"), "done"]),
    "parallel": Scenario([calls("echo", "echo", "echo"), "done"]),
    "sequential": Scenario([calls("one_at_a_time", "one_at_a_time"), "done"]),
    "tool failure": Scenario([calls("broken"), "recovered"]),
    "model failure": Scenario([Reply(error=ModelError("no", retryable=False))]),
    "turn limit": Scenario([calls("echo"), "never"], options={"max_turns": 1}),
    "repairs": Scenario(
        ["repaired"],
        before=[
            MessageEntry(id="u0", message=user_message("before")),
            MessageEntry(
                id="a0",
                parent_id="u0",
                message=assistant_message(ToolCall(id="dangling", name="echo")),
            ),
        ],
    ),
    "no input": Scenario(
        ["from history"], run=(), before=[MessageEntry(id="u0", message=user_message("q"))]
    ),
    "continue-as-new": Scenario([calls("echo"), calls("echo"), "done"], can_every=1),
    "cancel while streaming": Scenario([SLOW_REPLY], cancel="update"),
    "cancel while a tool runs": Scenario([calls("slow"), "never"], cancel="tool"),
    "cancel while streaming with a steer queued": Scenario(
        [SLOW_REPLY], cancel="update", send=[("shorter", "next_turn")]
    ),
    "approved with edited arguments": Scenario(
        [calls("approve_me"), "done"], edit={"text": "edited"}
    ),
    "cancel while waiting with two messages queued": Scenario(
        [calls("echo", "approve_me"), "never"],
        cancel="approval",
        send=[("and then?", "at_end"), ("steer", "next_turn")],
    ),
}


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    """What must agree: type, receipt entries (exact encodings), leaf, message, call."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        a = e.agent
        assert a is not None
        if a.type == "message_update":
            continue
        entries = None if e.entries is None else [encode_entry(x) for x in e.entries]
        message = None if a.message is None else a.message.model_dump_json(exclude={"timestamp"})
        result = None if a.result is None else a.result.text()
        out.append(
            (a.type, entries, e.leaf_id, message, a.tool_call_id, a.args, result, a.is_error)
        )
    return out


async def _cancel_when(
    stream: RunStream, when: str, send: list[tuple[str, When]], client: Client, session: str
) -> list[Event]:
    seen: list[Event] = []
    cancelled = False
    sending: list[asyncio.Future[Entry]] = []
    try:
        async for event in stream.events():
            seen.append(event)
            kind = event.agent.type if event.agent else ""
            due = (
                (when == "update" and kind == "message_update")
                or (when == "tool" and kind == "tool_execution_start")
                or (when == "approval" and kind == "approval_requested")
            )
            if due and not cancelled:
                cancelled = True
                if when == "tool":
                    # the client derives the start from the stored reply, which may be before
                    # the run saw it: a cancel then would stop a tool that never started
                    await eventually(_running, what="the slow tool running")
                for n, (text, how) in enumerate(send, 1):
                    sending.append(asyncio.ensure_future(stream.send(text, when=how)))
                    await _held(client, session, stream.run_id, n)
                await stream.cancel()
    except Exception:
        pass
    sent = [await asyncio.wait_for(s, 30) for s in sending]
    delivered = [e.entries for e in seen if _delivered(e) and e.entries is not None]
    assert [e.id for e in sent] == [entries[0].id for entries in delivered]
    return seen


async def _approve_edited(agent: Agent, stream: RunStream, args: dict[str, Any]) -> list[Event]:
    seen: list[Event] = []
    async for event in stream.events():
        seen.append(event)
        if event.agent is not None and event.agent.type == "approval_requested":
            for item in agent.pending_approvals():
                await agent.decide(item.tool_call_id, True, args=args)
    return seen


async def _running() -> bool:
    return bool(RUNNING)


def _delivered(event: Event) -> bool:
    return (
        event.agent is not None
        and event.agent.type == "input_delivered"
        and event.entries is not None
    )


async def _held(client: Client, session: str, rid: str, n: int) -> None:
    """Until the run holds ``n`` messages (its ``state()`` query)."""
    handle = client.get_workflow_handle(run_workflow_id(session, rid))

    async def probe() -> bool:
        state: RunState = await handle.query("state", result_type=RunState)
        return state.queued_inputs >= n

    await eventually(probe, within=30, what=f"{n} queued message(s)")


async def _stored(store: MemoryStore, session: str) -> int:
    """Entries stored so far (a new session is created by its first run)."""
    try:
        return len(await store.load_entries(session))
    except SessionNotFoundError:
        return 0


async def _run(client: Client, name: str, scenario: Scenario) -> None:
    store, q, session, rid = MemoryStore(), queue(), sid("chain"), run_id()
    agents = {
        "a": AgentSpec(
            model=ScriptedModel(scenario.script),
            tools=[echo, one_at_a_time, broken, slow, approve_me],
        )
    }
    async with running_worker(client, store, agents, task_queue=q):
        ex = executor(client, q, continue_as_new_after_turns=scenario.can_every)
        agent = await new("a", store=store, session_id=session, executor=ex, **scenario.options)
        if scenario.before:
            await store.create_session(session)
            await store.append_entries(session, scenario.before)
            agent = await new("a", store=store, session_id=session, executor=ex, **scenario.options)
        after = await _stored(store, session)
        start_leaf = agent.leaf_id
        stream = await agent.run(*scenario.run, run_id=rid)
        if scenario.edit is not None:
            client_events = await _approve_edited(agent, stream, scenario.edit)
        elif scenario.cancel is None:
            client_events = (await consume(stream)).events
        else:
            client_events = await _cancel_when(
                stream, scenario.cancel, scenario.send, client, session
            )
        handle = client.get_workflow_handle(run_workflow_id(session, rid), result_type=RunResult)
        outcome: Outcome = "completed"
        usage: Usage | None = None
        try:
            usage = (await handle.result()).usage
        except WorkflowFailureError as exc:
            outcome = "cancelled" if "cancel" in name else "failed"
            assert exc is not None
        answer: EventsAnswer = await handle.query("events", 0, result_type=EventsAnswer)
        stored = await store.load_entries(session)

    by_id = {e.id: e for e in stored}
    recorded = [hydrate(w, by_id) for w in answer.events]
    input_ids = [
        e.id for e in stored[after:] if isinstance(e, MessageEntry) and e.message.role == "user"
    ][: len(scenario.run)]
    repairs = sum(1 for e in stored[after:] if isinstance(e, MessageEntry) and e.synthetic)
    chain = RunChain(session, start_leaf, input_ids, repairs)
    derived = chain.add(stored[after:]) + chain.end(outcome, usage)

    if scenario.can_every is None:
        assert answer.first_position == 1
        assert shape(derived) == shape(recorded), name
    else:  # continue-as-new carries the last turns: the recorded events end the derived ones
        assert shape(derived)[-len(recorded) :] == shape(recorded), name
    assert shape(client_events) == shape(derived), name
    assert chain.ids == [e.id for e in stored[after:]]


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_events_derived_from_the_store_are_the_recorded_events(
    temporal_client: Client, name: str
) -> None:
    await _run(temporal_client, name, SCENARIOS[name])


async def test_a_continued_parked_run_starts_its_call_with_the_edited_arguments(
    temporal_client: Client,
) -> None:
    """A call decided while its run was parked, with edited arguments: the continuation run's
    ``tool_execution_start`` carries what the tool is handed, on the client as recorded."""
    store, q, session, rid = MemoryStore(), queue(), sid("chain"), run_id()
    spec = AgentSpec(model=ScriptedModel([calls("approve_me"), "done"]), tools=[approve_me])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        ex = executor(temporal_client, q)
        agent = await new("a", store=store, session_id=session, executor=ex, approval_wait=0.1)
        await (await agent.run("go")).wait()  # parks: the call waits
        await agent.decide("c0", True, args={"text": "edited"})
        client_events = (await consume(await agent.run(run_id=rid))).events
        handle = temporal_client.get_workflow_handle(run_workflow_id(session, rid))
        answer: EventsAnswer = await handle.query("events", 0, result_type=EventsAnswer)
        stored = {e.id: e for e in await store.load_entries(session)}
    recorded = [hydrate(w, stored) for w in answer.events]
    starts = [e.agent.args for e in client_events if e.agent and e.agent.args is not None]
    assert starts == [{"text": "edited"}]
    assert shape(client_events) == shape(recorded)
