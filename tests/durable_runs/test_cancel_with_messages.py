"""Messages a run accepted and then was cancelled holding, on every executor: each is stored
after the cancellation's results as an ordinary user message, in the order received, emitted as
``input_delivered``, with no model call after it; the sender gets the stored entry, and the next
run answers it (docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from durable_agent import Agent, Event, MessageEntry, RunCancelledError, ScriptedModel
from durable_agent.ai import Reply
from durable_agent.session import Entry, Store
from tests.durable_runs.support import kinds
from tests.durable_runs.test_approvals import Reader, email, send_email, shape, stored
from tests.durable_runs.test_steering import queued
from tests.support.harness import Harness
from tests.support.polling import eventually

SLOW_REPLY = Reply(text="a long reply that streams slowly " * 40, chunk_size=4, chunk_delay=0.05)


async def cancelled_events(reader: Reader) -> list[Event]:
    with contextlib.suppress(RunCancelledError):
        await asyncio.wait_for(reader.task, 30)
    return reader.events


def delivered(events: list[Event]) -> list[Entry]:
    out: list[Entry] = []
    for e in events:
        if e.agent is not None and e.agent.type == "input_delivered":
            assert e.entries is not None and len(e.entries) == 1
            out.extend(e.entries)
    return out


async def cancel(stream: Any) -> None:
    await stream.cancel()
    with contextlib.suppress(RunCancelledError):
        await asyncio.wait_for(stream.wait(), 30)


async def answered_by_the_next_run(agent: Agent, lm: ScriptedModel, text: str) -> None:
    """A run with no input starts from the stored message: the model answers it."""
    calls = len(lm.requests)
    nxt = await agent.run()
    await asyncio.wait_for(nxt.wait(), 30)
    assert len(lm.requests) == calls + 1
    assert lm.requests[-1].messages[-1].text() == text
    last = stored(agent)[-1]
    assert isinstance(last, MessageEntry) and last.message.role == "assistant"


async def test_cancel_while_the_model_streams_stores_the_queued_steer(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel([SLOW_REPLY, "the short version"])
    agent = await harness.open(lm, store=store)
    stream = await agent.run("write a lot")
    reader = Reader(stream)

    async def calling() -> bool:
        return len(lm.requests) >= 1

    await eventually(calling, within=30, what="the model call")
    sending = asyncio.ensure_future(stream.send("shorter, please"))
    await queued(agent, client=getattr(harness, "client", None))
    await cancel(stream)
    steer = await asyncio.wait_for(sending, 30)
    assert isinstance(steer, MessageEntry) and steer.message.text() == "shorter, please"
    entries = stored(agent)
    assert entries[-1].id == steer.id  # the run's last entry: no model call after it
    assert shape(entries) in (["user", "assistant", "user"], ["user", "user"])
    assert len(lm.requests) == 1
    events = await cancelled_events(reader)
    names = kinds(events, updates=False)
    assert names[-1] == "input_delivered" and names.count("turn_start") == 1
    assert delivered(events) == [steer]
    await answered_by_the_next_run(agent, lm, "shorter, please")


async def test_cancel_during_an_approval_wait_stores_the_queued_follow_up(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel([Reply(tool_calls=[email()]), "answering the follow-up"])
    agent = await harness.open(lm, store=store, tools=[send_email])
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    sending = asyncio.ensure_future(stream.send("and cc alice", when="at_end"))
    await queued(agent, client=getattr(harness, "client", None))
    await cancel(stream)
    follow = await asyncio.wait_for(sending, 30)
    entries = stored(agent)
    assert shape(entries) == ["user", "assistant", "approval_request", "tool_result", "user"]
    assert entries[3].message.text() == "tool execution cancelled"
    assert isinstance(follow, MessageEntry)
    assert entries[-1].id == follow.id and follow.message.text() == "and cc alice"
    assert follow.parent_id == entries[3].id
    assert agent.pending_approvals() == []
    events = await cancelled_events(reader)
    names = kinds(events, updates=False)
    assert names[-3:] == ["message_start", "message_end", "input_delivered"]
    assert delivered(events) == [follow]
    await answered_by_the_next_run(agent, lm, "and cc alice")


async def test_two_queued_messages_keep_the_order_received(harness: Harness, store: Store) -> None:
    lm = ScriptedModel([Reply(tool_calls=[email()]), "answering both"])
    agent = await harness.open(lm, store=store, tools=[send_email])
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    client = getattr(harness, "client", None)
    # a follow-up first, then a steer: the order received, whatever ``when`` says
    first = asyncio.ensure_future(stream.send("first", when="at_end"))
    await queued(agent, 1, client=client)
    second = asyncio.ensure_future(stream.send("second"))
    await queued(agent, 2, client=client)
    await cancel(stream)
    sent = [await asyncio.wait_for(first, 30), await asyncio.wait_for(second, 30)]
    entries = stored(agent)
    assert [e.id for e in entries[-2:]] == [s.id for s in sent]
    assert [e.message.text() for e in entries[-2:]] == ["first", "second"]
    assert delivered(await cancelled_events(reader)) == sent
    await answered_by_the_next_run(agent, lm, "second")
