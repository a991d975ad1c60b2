"""Cancelling a run: partials and results stored, waiting and reading tasks independent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agent import (
    Event,
    MessageEntry,
    RunCancelledError,
    model,
    new,
)
from durable_agent.ai import (
    Reply,
    ScriptedModel,
    ToolCall,
    tool,
)
from durable_agent.session import Entry, Store
from tests.durable_runs.support import (
    assert_chain,
    collect,
    collect_until_cancelled,
    stored_texts,
    texts,
)
from tests.support.gate_tool import GateTool
from tests.support.harness import Harness

# -- cancellation -----------------------------------------------------------------------------


async def test_cancel_mid_stream_stores_the_aborted_partial() -> None:
    lm = ScriptedModel([Reply(text="abcdefgh" * 4, chunk_delay=0.05)])
    agent = await new(model(lm))
    stream = await agent.run("q")
    seen: list[Event] = []
    async for event in stream.events():
        seen.append(event)
        if event.agent is not None and event.agent.type == "message_update":
            await stream.cancel()
            break
    with pytest.raises(RunCancelledError):
        await stream.wait()
    assert not agent.running
    stored = await agent.store.load_entries(agent.session_id)
    assert len(stored) == 2
    partial = stored[1]
    assert isinstance(partial, MessageEntry)
    assert partial.message.stop_reason == "aborted"
    assert partial.message.text() == "abcdefgh"
    assert agent.leaf_id == partial.id


async def test_cancel_mid_tool_call_drops_the_unfinished_call() -> None:
    long_args = {"text": "x" * 80}  # streams in several chunks
    reply = Reply(
        text="hi",
        tool_calls=[
            ToolCall(id="c1", name="echo", arguments={"text": "a"}),
            ToolCall(id="c2", name="echo", arguments=long_args),
        ],
        chunk_delay=0.05,
    )
    ran: list[str] = []

    @tool
    async def echo_logged(text: str) -> str:
        ran.append(text)
        return text

    agent = await new(model(ScriptedModel([reply, "unused"])), tools=(echo_logged,))
    stream = await agent.run("go")
    events: list[Event] = []
    with pytest.raises(RunCancelledError):  # events() raises after its last event
        async for event in stream.events():
            events.append(event)
            inner = event.agent
            if inner is not None and inner.type == "message_update" and inner.message is not None:
                blocks = inner.message.content
                if blocks and isinstance(blocks[-1], ToolCall) and blocks[-1].id == "c2":
                    await stream.cancel()
    with pytest.raises(RunCancelledError):
        await stream.wait()
    stored = await agent.store.load_entries(agent.session_id)
    assert len(stored) == 3
    partial, result = stored[1], stored[2]
    assert isinstance(partial, MessageEntry) and isinstance(result, MessageEntry)
    assert partial.message.stop_reason == "aborted"
    assert partial.message.text() == "hi"
    assert [c.id for c in partial.message.tool_calls()] == ["c1"]
    assert result.message.tool_call_id == "c1" and result.message.is_error
    assert result.message.text() == "tool execution cancelled"
    assert ran == []
    # the stream delivered both receipts before ending
    receipts = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert [r.entries for r in receipts] == [[partial], [result]]
    assert receipts[-1].leaf_id == result.id == agent.leaf_id


async def test_cancel_while_tools_run(harness: Harness, store: Store) -> None:
    forever = GateTool("forever")  # never released
    calls = [ToolCall(id="f1", name="forever"), ToolCall(id="f2", name="forever")]
    agent = await harness.open(
        [Reply(text="working", tool_calls=calls), "unused"],
        store=store,
        session_id="cancel-tools",
        tools=[forever.tool],
    )
    stream = await agent.run("go")
    await forever.started.wait()
    await stream.cancel()
    with pytest.raises(RunCancelledError):
        await stream.wait()
    with pytest.raises(RunCancelledError):
        await collect(stream)
    assert not agent.running
    stored = await store.load_entries("cancel-tools")
    assert stored_texts(stored) == [
        "go",
        "working",
        "tool execution cancelled",
        "tool execution cancelled",
    ]
    results = [e.message for e in stored[2:] if isinstance(e, MessageEntry)]
    assert [m.tool_call_id for m in results] == ["f1", "f2"]
    assert all(m.role == "tool_result" and m.is_error for m in results)
    asked = stored[1]
    assert isinstance(asked, MessageEntry) and asked.message.stop_reason == "tool_use"
    assert_chain(stored)
    assert agent.leaf_id == stored[-1].id
    # nothing is left to repair: the next run stores only its input
    agent2 = await harness.open(["fresh"], store=store, session_id="cancel-tools")
    events = await collect(await agent2.run("again"))
    assert events[0].entries is not None and stored_texts(events[0].entries) == ["again"]


async def test_cancelled_tool_sees_cancellation_in_process() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def forever() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    agent = await new(model(ScriptedModel([Reply.call("forever", id="f1")])), tools=(forever,))
    stream = await agent.run("go")
    await started.wait()
    await stream.cancel()
    assert cancelled.is_set()
    with pytest.raises(RunCancelledError):
        await stream.wait()


async def test_cancel_right_after_run_returns() -> None:
    """A cancel before the producer ever ran still ends the stream and clears the flags."""
    agent = await new(model(ScriptedModel(["after"])))
    stream = await agent.run("q")
    await stream.cancel()
    with pytest.raises(RunCancelledError):
        await stream.wait()
    with pytest.raises(RunCancelledError):
        await asyncio.wait_for(collect(stream), 5)
    assert not agent.running
    assert texts(await (await agent.run("again")).wait()) == ["after"]


async def test_cancel_after_completion_changes_nothing(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a"], store=store, session_id="cancel-late")
    stream = await agent.run("q")
    messages = await stream.wait()
    await stream.cancel()
    assert texts(await stream.wait()) == texts(messages) == ["a"]
    assert len(await store.load_entries("cancel-late")) == 2


async def test_cancelling_the_waiting_task_does_not_cancel_the_run(
    harness: Harness, store: Store
) -> None:
    gate = GateTool()
    agent = await harness.open(
        [Reply.call("gate", id="g1"), "after"], store=store, session_id="waiter", tools=[gate.tool]
    )
    stream = await agent.run("go")
    waiter = asyncio.create_task(stream.wait())
    await gate.started.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert agent.running
    gate.release.set()
    assert texts(await stream.wait()) == ["", "opened", "after"]
    assert stored_texts(await store.load_entries("waiter")) == ["go", "", "opened", "after"]


class GatedCancelResults:
    """Delegates to a real store; holds the append of ``tool execution cancelled`` results."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.ended: asyncio.Event | None = None
        self.ended_before_write: bool | None = None
        """Whether the run had ended when the held write returned."""

    async def create_session(self, session_id: str, parent_id: str | None = None) -> Any:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if any(
            isinstance(e, MessageEntry) and e.message.text() == "tool execution cancelled"
            for e in entries
        ):
            self.entered.set()
            await self.release.wait()
            await self.inner.append_entries(session_id, entries)
            self.ended_before_write = self.ended is not None and self.ended.is_set()
            return
        await self.inner.append_entries(session_id, entries)


async def test_second_cancel_does_not_interrupt_storing_the_cancellation(store: Store) -> None:
    forever = GateTool("forever")  # never released
    gated = GatedCancelResults(store)
    agent = await new(
        model(ScriptedModel([Reply.call("forever", id="f1")])),
        store=gated,
        session_id="double-cancel",
        tools=(forever.tool,),
    )
    stream = await agent.run("go")
    await forever.started.wait()
    ended = gated.ended = asyncio.Event()
    stream.when_done(ended.set)
    reading = asyncio.ensure_future(collect_until_cancelled(stream))
    first = asyncio.create_task(stream.cancel())
    await gated.entered.wait()  # the cancellation result is being stored
    second = asyncio.create_task(stream.cancel())
    # release the write only after the second cancel's first step, in which a second
    # ``task.cancel()`` would interrupt the storing (asyncio runs callbacks in FIFO order)
    asyncio.get_running_loop().call_soon(gated.release.set)
    await asyncio.gather(first, second)
    assert gated.ended_before_write is False  # the run ended only after its result was stored
    assert ended.is_set() and not agent.running
    events = await reading
    receipts = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert stored_texts(receipts[-1].entries or []) == ["tool execution cancelled"]
    with pytest.raises(RunCancelledError):
        await stream.wait()
    stored = await store.load_entries("double-cancel")
    assert stored_texts(stored) == ["go", "", "tool execution cancelled"]
    assert agent.leaf_id == stored[-1].id
