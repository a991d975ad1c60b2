"""Run streams (docs/design.md#receipts): receipts, event order, and what consumers see; see
``support``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

import pytest

from durable_agent import (
    Event,
    MessageEntry,
    ephemeral,
    meta,
    model,
    new,
)
from durable_agent.agent import AgentEvent, AgentRun, ModelLoop
from durable_agent.agent.approval import Resume
from durable_agent.ai import (
    Message,
    Reply,
    ScriptedModel,
)
from durable_agent.session import Store
from durable_agent.session.tree import tree
from tests.durable_runs.support import (
    ONE_TOOL_TURN,
    assert_chain,
    collect,
    dangling_session_entries,
    echo,
    echo_turn,
    kinds,
    texts,
)
from tests.support.gate_tool import GateTool
from tests.support.harness import Harness

# -- receipts and event order -------------------------------------------------------------------


async def test_one_tool_turn_stores_chain_with_receipts(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        echo_turn(),
        store=store,
        session_id="one-tool",
        tools=[echo],
    )
    stream = await agent.run("go")
    events = await collect(stream)
    assert kinds(events, updates=False) == ONE_TOOL_TURN
    assert all(e.type == "agent" and e.session_id == "one-tool" for e in events)

    stored = await store.load_entries("one-tool")
    assert [e.message.role for e in stored if isinstance(e, MessageEntry)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert stored[0].parent_id is None
    assert_chain(stored)

    start = events[0]
    assert start.entries == [stored[0]] and start.leaf_id == stored[0].id
    receipts = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert len(receipts) == 3
    for receipt, entry in zip(receipts, stored[1:], strict=True):
        assert receipt.entries == [entry]
        assert receipt.leaf_id == entry.id
        assert isinstance(entry, MessageEntry) and receipt.agent is not None
        assert receipt.agent.message == entry.message
    for event in events:
        if event is not start and event not in receipts:
            assert event.entries is None and event.leaf_id is None

    assert texts(await stream.wait()) == ["", "echo: x", "done"]
    assert agent.leaf_id == stored[-1].id
    assert [e.id for e in agent.entries()] == [e.id for e in stored]


async def test_full_event_sequence_wraps_inner_events_unchanged() -> None:
    """In-process: updates included, and each stream event wraps the loop's event object."""
    lm = ScriptedModel(echo_turn())
    yielded: list[AgentEvent] = []

    class Recording(ModelLoop):
        def run(self, messages: Sequence[Message], *, resume: Resume | None = None) -> AgentRun:
            inner = super().run(messages, resume=resume)

            async def events() -> AsyncGenerator[AgentEvent, None]:
                async for event in inner.events():
                    yielded.append(event)
                    yield event

            return AgentRun(events())

    agent = await new(lambda options: Recording(lm, options), tools=(echo,))
    events = await collect(await agent.run("go"))
    assert kinds(events) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "message_start",
        "message_end",
        "turn_end",
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    assert [e.agent for e in events] == yielded
    assert all(e.agent is y for e, y in zip(events, yielded, strict=True))


async def test_what_a_consumer_saw_is_already_stored(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        echo_turn("y"),
        store=store,
        session_id="saw-stored",
        tools=[echo],
    )
    stream = await agent.run("go")
    checked = 0
    async for event in stream.events():
        if event.entries:
            stored_ids = {e.id for e in await store.load_entries("saw-stored")}
            assert {e.id for e in event.entries} <= stored_ids
            checked += 1
    assert checked == 4  # agent_start and three message_end receipts


async def test_agent_start_entries_always_a_list(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a1", "a2", "a3"], store=store, session_id="start-list")
    events = await collect(await agent.run("q"))
    assert events[0].entries is not None and len(events[0].entries) == 1
    leaf = agent.leaf_id
    events = await collect(await agent.run(ephemeral("nudge")))
    assert events[0].entries == [] and events[0].leaf_id == leaf
    leaf = agent.leaf_id
    events = await collect(await agent.run())
    assert events[0].entries == [] and events[0].leaf_id == leaf


async def test_input_is_never_echoed(harness: Harness, store: Store) -> None:
    agent = await harness.open(["answer"], store=store, session_id="no-echo")
    events = await collect(await agent.run("question", meta("context"), ephemeral("nudge")))
    for event in events:
        assert event.agent is not None
        message = event.agent.message
        assert message is None or message.role == "assistant"
    assert kinds(events, updates=False) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ]


async def test_wait_returns_receipt_messages_only(harness: Harness, store: Store) -> None:
    await store.create_session("wait-only")
    await store.append_entries("wait-only", dangling_session_entries())
    agent = await harness.open(["ok"], store=store, session_id="wait-only")
    messages = await (await agent.run("carry on")).wait()
    assert texts(messages) == ["ok"]  # neither the repair result nor the input


async def test_lifecycle_events_never_appear_in_the_stream() -> None:
    published: list[Event] = []
    agent = await new(
        model(ScriptedModel(echo_turn("z"))),
        tools=(echo,),
        publisher=published.append,
    )
    published.clear()
    events = await collect(await agent.run("go"))
    assert {e.type for e in events} == {"agent"}
    assert published == []  # run receipts are not published either


# -- consumers ----------------------------------------------------------------------------------


async def test_cancelling_the_reading_task_does_not_cancel_the_run(
    harness: Harness, store: Store
) -> None:
    gate = GateTool()
    agent = await harness.open(
        [Reply.call("gate", id="g1"), "after"], store=store, session_id="reader", tools=[gate.tool]
    )
    stream = await agent.run("go")

    async def read() -> None:
        async for _ in stream.events():
            pass

    reader = asyncio.create_task(read())
    await gate.started.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert agent.running
    gate.release.set()
    assert texts(await stream.wait()) == ["", "opened", "after"]
    assert len(await store.load_entries("reader")) == 4


async def test_breaking_out_of_events_does_not_stop_persistence(
    harness: Harness, store: Store
) -> None:
    agent = await harness.open(
        echo_turn(),
        store=store,
        session_id="break",
        tools=[echo],
    )
    stream = await agent.run("go")
    async for _ in stream.events():
        break
    assert texts(await stream.wait()) == ["", "echo: x", "done"]
    assert len(await store.load_entries("break")) == 4


async def test_unread_stream_still_persists(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        echo_turn(),
        store=store,
        session_id="unread",
        tools=[echo],
    )
    stream = await agent.run("go")
    await stream.wait()
    assert len(await store.load_entries("unread")) == 4
    assert not agent.running


async def test_second_events_call_raises(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a"], store=store, session_id="twice")
    stream = await agent.run("q")
    await collect(stream)
    with pytest.raises(RuntimeError):
        stream.events()


async def test_stored_tree_after_several_runs(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a1", "a2"], store=store, session_id="tree")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    roots = tree(await store.load_entries("tree"))
    assert len(roots) == 1
    node, depth = roots[0], 1
    while node.children:
        (node,) = node.children
        depth += 1
    assert depth == 4
