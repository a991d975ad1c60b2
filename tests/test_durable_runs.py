"""Runs (SPEC §4.4), run-start repair (§5.2), executor-written results (§5.3), the run stream
(§6.1): receipts, event order, model failures, cancellation, consumers.

Harness scenarios run on every executor; they do not assert on what Temporal legitimately cannot
give (``message_update`` events, ephemeral copies in ``entries()``, retry ``message_start``s).
Those assertions live in the in-process-only tests that call ``new`` directly.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agent import (
    CompactionEntry,
    CustomEntry,
    Event,
    MessageEntry,
    ModelError,
    RunCancelledError,
    ephemeral,
    meta,
    model,
    new,
    text,
)
from durable_agent.agent import AgentEvent, AgentOptions, AgentRun, Hooks, ModelLoop
from durable_agent.ai import (
    Message,
    Reply,
    RetryPolicy,
    ScriptedModel,
    TextContent,
    ToolCall,
    assistant_message,
    tool,
    tool_result_message,
    user_message,
)
from durable_agent.session import Entry, Store
from durable_agent.session.tree import tree
from tests.support.harness import Harness

FAST_RETRY = {"max_attempts": 3, "initial_interval": 0}
"""Plain data (valid on every executor): retries without waiting."""

ONE_TOOL_TURN = [
    "agent_start",
    "turn_start",
    "message_start",
    "message_end",
    "tool_execution_start",
    "tool_execution_end",
    "message_start",
    "message_end",
    "turn_end",
    "turn_start",
    "message_start",
    "message_end",
    "turn_end",
    "agent_end",
]


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


def kinds(events: Sequence[Event], *, updates: bool = True) -> list[str]:
    out = []
    for event in events:
        assert event.agent is not None
        if not updates and event.agent.type in ("message_update", "tool_execution_update"):
            continue
        out.append(event.agent.type)
    return out


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


def assert_chain(entries: Sequence[Entry]) -> None:
    for parent, child in itertools.pairwise(entries):
        assert child.parent_id == parent.id


async def collect(stream: Any) -> list[Event]:
    return [e async for e in stream.events()]


async def collect_until_cancelled(stream: Any) -> list[Event]:
    events: list[Event] = []
    with pytest.raises(RunCancelledError):
        async for event in stream.events():
            events.append(event)
    return events


def dangling_session_entries() -> list[Entry]:
    """What a crash between an assistant tool call and its result leaves."""
    return [
        MessageEntry(id="u1", message=user_message("go")),
        MessageEntry(
            id="a1",
            parent_id="u1",
            message=assistant_message(
                TextContent(text="let me check"), ToolCall(id="call-9", name="echo")
            ),
        ),
    ]


# -- receipts and event order -------------------------------------------------------------------


async def test_one_tool_turn_stores_chain_with_receipts(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply.call("echo", {"text": "x"}, id="c1"), "done"],
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
    lm = ScriptedModel([Reply.call("echo", {"text": "x"}, id="c1"), Reply(text="done")])
    yielded: list[AgentEvent] = []

    class Recording(ModelLoop):
        def run(self, messages: Sequence[Message]) -> AgentRun:
            inner = super().run(messages)

            async def events() -> Any:
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
        [Reply.call("echo", {"text": "y"}, id="c1"), "done"],
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
        model(ScriptedModel([Reply.call("echo", {"text": "z"}, id="c1"), "done"])),
        tools=(echo,),
        publisher=published.append,
    )
    published.clear()
    events = await collect(await agent.run("go"))
    assert {e.type for e in events} == {"agent"}
    assert published == []  # run receipts are not published either


# -- inputs -------------------------------------------------------------------------------------


async def test_ephemeral_only_input_nudge(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["ok", "nudged reply"])
    agent = await harness.open(lm, store=store, session_id="nudge")
    await (await agent.run("hi")).wait()
    old_leaf = agent.leaf_id
    events = await collect(await agent.run(ephemeral("nudge")))
    assert texts(lm.requests[1].messages) == ["hi", "ok", "nudge"]
    assert events[0].entries == []
    stored = await store.load_entries("nudge")
    assert stored_texts(stored) == ["hi", "ok", "nudged reply"]
    assert stored[-1].parent_id == old_leaf
    assert agent.leaf_id == stored[-1].id
    assert texts(agent.messages()) == ["hi", "ok", "nudged reply"]


async def test_ephemeral_nudge_log_in_process() -> None:
    agent = await new(model(ScriptedModel(["ok", "nudged reply"])))
    await (await agent.run("hi")).wait()
    old_leaf = agent.leaf_id
    await (await agent.run(ephemeral("nudge"))).wait()
    nudge, reply = agent.entries()[-2:]
    assert isinstance(nudge, MessageEntry) and nudge.ephemeral
    assert nudge.parent_id == old_leaf and reply.parent_id == old_leaf
    assert len(await agent.store.load_entries(agent.session_id)) == 3


async def test_mixed_input_order_and_chaining(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["reply"])
    agent = await harness.open(lm, store=store, session_id="mixed")
    events = await collect(await agent.run(text("A"), ephemeral("Eph"), text("B")))
    assert texts(lm.requests[0].messages) == ["A", "Eph", "B"]
    receipt = events[0].entries
    assert receipt is not None and stored_texts(receipt) == ["A", "B"]
    a, b = receipt
    assert a.parent_id is None and b.parent_id == a.id
    stored = await store.load_entries("mixed")
    assert stored_texts(stored) == ["A", "B", "reply"]
    assert stored[2].parent_id == b.id


async def test_meta_input_is_stored_and_sent_but_hidden(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["answer"])
    agent = await harness.open(lm, store=store, session_id="meta-in")
    events = await collect(await agent.run(meta("the user is on mobile"), "question"))
    assert texts(lm.requests[0].messages) == ["the user is on mobile", "question"]
    assert events[0].entries is not None and len(events[0].entries) == 2
    stored = await store.load_entries("meta-in")
    assert isinstance(stored[0], MessageEntry) and stored[0].meta
    transcript = [e for e in agent.transcript() if isinstance(e, MessageEntry)]
    assert stored_texts(transcript) == ["question", "answer"]


async def test_custom_and_compaction_inputs_are_stored_never_sent(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel(["first", "second"])
    agent = await harness.open(lm, store=store, session_id="custom-in")
    await (await agent.run("q1")).wait()
    note = CustomEntry(kind="ui_state")
    summary = CompactionEntry(summary="earlier: q1/first")
    events = await collect(await agent.run(note, summary, "q2"))
    assert texts(lm.requests[1].messages) == ["q1", "first", "q2"]
    receipt = events[0].entries
    assert receipt is not None
    assert [type(e).__name__ for e in receipt] == ["CustomEntry", "CompactionEntry", "MessageEntry"]
    stored = await store.load_entries("custom-in")
    assert len(stored) == 6
    assert_chain(stored)
    # the stored compaction applies to later views
    assert texts(agent.messages()) == ["earlier: q1/first", "q2", "second"]


async def test_run_without_input_continues_from_history(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["continued"])
    agent = await harness.open(lm, store=store, session_id="no-input")
    await agent.append("pending question")
    messages = await (await agent.run()).wait()
    assert texts(messages) == ["continued"]
    assert texts(lm.requests[0].messages) == ["pending question"]


async def test_hook_follow_ups_are_stored_and_returned() -> None:
    asked = False

    def follow_up(produced: Sequence[Message]) -> list[Message] | None:
        nonlocal asked
        if asked:
            return None
        asked = True
        return [user_message("are you sure?")]

    agent = await new(model(ScriptedModel(["yes", "certain"])), hooks=Hooks(follow_up=follow_up))
    stream = await agent.run("q")
    events = await collect(stream)
    receipts = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert len(receipts) == 3
    assert texts(await stream.wait()) == ["yes", "are you sure?", "certain"]
    stored = await agent.store.load_entries(agent.session_id)
    assert stored_texts(stored) == ["q", "yes", "are you sure?", "certain"]
    assert_chain(stored)
    turn_starts = [e for e in events if e.agent is not None and e.agent.type == "turn_start"]
    assert turn_starts[1].agent is not None and turn_starts[1].agent.input is not None


# -- tools ------------------------------------------------------------------------------------


async def test_parallel_tools_overlap_results_stored_in_call_order() -> None:
    a_started = asyncio.Event()
    b_done = asyncio.Event()
    finished: list[str] = []

    @tool
    async def work(name: str) -> str:
        """a finishes only after b, b starts only once a runs: the calls must overlap."""
        if name == "a":
            a_started.set()
            await b_done.wait()
        else:
            await a_started.wait()
            b_done.set()
        finished.append(name)
        return f"done {name}"

    calls = [
        ToolCall(id="ca", name="work", arguments={"name": "a"}),
        ToolCall(id="cb", name="work", arguments={"name": "b"}),
    ]
    agent = await new(model(ScriptedModel([Reply(tool_calls=calls), "both"])), tools=(work,))
    stream = await agent.run("go")
    events = await asyncio.wait_for(collect(stream), 10)
    assert finished == ["b", "a"]
    stored = await agent.store.load_entries(agent.session_id)
    results = [e.message for e in stored if isinstance(e, MessageEntry)][2:4]
    assert [m.tool_call_id for m in results] == ["ca", "cb"]
    assert_chain(stored)
    receipt_ids = [
        e.agent.message.tool_call_id
        for e in events
        if e.agent is not None and e.agent.type == "message_end" and e.agent.message is not None
    ]
    assert receipt_ids == [None, "ca", "cb", None]


async def test_parallel_unsafe_tool_runs_sequentially(harness: Harness, store: Store) -> None:
    log: list[str] = []
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(parallel_safe=False)
    async def exclusive() -> str:
        log.append("exclusive start")
        started.set()
        await release.wait()  # held until the test saw that nothing else started meanwhile
        log.append("exclusive end")
        return "x"

    @tool
    async def normal() -> str:
        log.append("normal start")
        return "n"

    calls = [ToolCall(id="c1", name="exclusive"), ToolCall(id="c2", name="normal")]
    agent = await harness.open(
        [Reply(tool_calls=calls), "ok"],
        store=store,
        session_id="sequential",
        tools=[exclusive, normal],
    )
    running = asyncio.ensure_future(collect(await agent.run("go")))
    await started.wait()
    # a concurrently scheduled call would have started while exclusive holds (the tool order
    # below proves the same from the stream, on every executor)
    assert log == ["exclusive start"]
    release.set()
    events = await running
    assert log == ["exclusive start", "exclusive end", "normal start"]
    tool_events = [
        (e.agent.type, e.agent.tool_call_id)
        for e in events
        if e.agent is not None and e.agent.type in ("tool_execution_start", "tool_execution_end")
    ]
    assert tool_events == [
        ("tool_execution_start", "c1"),
        ("tool_execution_end", "c1"),
        ("tool_execution_start", "c2"),
        ("tool_execution_end", "c2"),
    ]


async def test_tool_failure_after_retries_is_stored(harness: Harness, store: Store) -> None:
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=2, initial_interval=0))
    async def broken() -> str:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("no such file")

    agent = await harness.open(
        [Reply.call("broken", id="b1"), "sorry"],
        store=store,
        session_id="tool-fails",
        tools=[broken],
    )
    await (await agent.run("go")).wait()
    assert attempts == 2
    stored = await store.load_entries("tool-fails")
    result = stored[2]
    assert isinstance(result, MessageEntry)
    assert result.message.role == "tool_result" and result.message.is_error
    assert result.message.text() == "tool execution failed: RuntimeError: no such file"
    assert stored_texts(stored)[-1] == "sorry"


async def test_non_retryable_tool_failure_is_stored(harness: Harness, store: Store) -> None:
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=5, initial_interval=0))
    async def strict() -> str:
        nonlocal attempts
        attempts += 1
        raise KeyError("missing")

    agent = await harness.open(
        [Reply.call("strict", id="s1"), "sorry"],
        store=store,
        session_id="tool-nonretry",
        tools=[strict],
    )
    await (await agent.run("go")).wait()
    assert attempts == 1
    result = (await store.load_entries("tool-nonretry"))[2]
    assert isinstance(result, MessageEntry)
    assert result.message.text() == "tool execution failed: KeyError: 'missing'"


# -- run-start repair (§5.2) ------------------------------------------------------------------


async def test_carry_on_example_in_process(store: Store) -> None:
    await store.create_session("crashed")
    await store.append_entries("crashed", dangling_session_entries())
    histories: list[list[Message]] = []
    inputs: list[list[Message]] = []
    lm = ScriptedModel(["carrying on"])

    class Recording(ModelLoop):
        def run(self, messages: Sequence[Message]) -> AgentRun:
            inputs.append(list(messages))
            return super().run(messages)

    def factory(options: AgentOptions) -> ModelLoop:
        histories.append(list(options.history))
        return Recording(lm, options)

    agent = await new(factory, store=store, session_id="crashed")
    shown = agent.messages()
    events = await collect(await agent.run("carry on"))

    (history,) = histories
    assert len(history) == 3 and history[2].role == "tool_result"
    assert history[2].tool_call_id == "call-9" and history[2].is_error
    assert texts(inputs[0]) == ["carry on"]

    stored = await store.load_entries("crashed")
    assert len(stored) == 5
    repair, carry_on, reply = stored[2:]
    assert isinstance(repair, MessageEntry) and repair.synthetic
    assert repair.parent_id == "a1"
    assert repair.message == shown[2] == history[2]  # equal to what the history showed
    assert repair.message.text() == "tool execution interrupted"
    assert repair.message.timestamp == stored[1].message.timestamp  # type: ignore[union-attr]
    assert isinstance(carry_on, MessageEntry) and carry_on.message.text() == "carry on"
    assert carry_on.parent_id == repair.id and not carry_on.synthetic
    assert reply.parent_id == carry_on.id
    assert events[0].entries == [repair, carry_on]


async def test_carry_on_example(harness: Harness, store: Store) -> None:
    await store.create_session("crashed-h")
    await store.append_entries("crashed-h", dangling_session_entries())
    lm = ScriptedModel(["carrying on"])
    agent = await harness.open(lm, store=store, session_id="crashed-h")
    events = await collect(await agent.run("carry on"))
    request = lm.requests[0].messages
    assert [m.role for m in request] == ["user", "assistant", "tool_result", "user"]
    assert request[2].text() == "tool execution interrupted"
    stored = await store.load_entries("crashed-h")
    assert [type(e).__name__ for e in stored] == ["MessageEntry"] * 5
    repair = stored[2]
    assert isinstance(repair, MessageEntry) and repair.synthetic
    assert repair.message.tool_call_id == "call-9" and repair.message.is_error
    assert repair.parent_id == "a1"
    assert stored_texts(stored)[3:] == ["carry on", "carrying on"]
    assert_chain(stored)
    assert events[0].entries == stored[2:4]


async def test_repair_after_custom_entries_changes_nothing(harness: Harness, store: Store) -> None:
    await store.create_session("crash-custom")
    await store.append_entries(
        "crash-custom",
        [*dangling_session_entries(), CustomEntry(id="n1", parent_id="a1", kind="note")],
    )
    agent = await harness.open(["fine"], store=store, session_id="crash-custom")
    shown = agent.messages()
    assert len(shown) == 3
    await (await agent.run("carry on")).wait()
    stored = await store.load_entries("crash-custom")
    repair = stored[3]
    assert isinstance(repair, MessageEntry) and repair.synthetic
    assert repair.parent_id == "n1"  # chained from the leaf
    assert repair.message == shown[2]
    assert stored_texts(stored)[-2:] == ["carry on", "fine"]


async def test_repair_of_partly_answered_calls_in_call_order(
    harness: Harness, store: Store
) -> None:
    calls = [ToolCall(id=f"c{i}", name="echo") for i in range(1, 4)]
    await store.create_session("partial")
    await store.append_entries(
        "partial",
        [
            MessageEntry(id="u1", message=user_message("go")),
            MessageEntry(id="a1", parent_id="u1", message=assistant_message(*calls)),
            MessageEntry(
                id="r2",
                parent_id="a1",
                message=tool_result_message("c2", "echo", TextContent(text="two")),
            ),
        ],
    )
    agent = await harness.open(["ok"], store=store, session_id="partial")
    events = await collect(await agent.run("next"))
    receipt = events[0].entries
    assert receipt is not None
    repairs = [e for e in receipt if isinstance(e, MessageEntry) and e.synthetic]
    assert [e.message.tool_call_id for e in repairs] == ["c1", "c3"]
    assert repairs[0].parent_id == "r2"
    assert stored_texts(receipt) == ["tool execution interrupted"] * 2 + ["next"]


async def test_dangling_call_not_at_tail_stays_projection_only(
    harness: Harness, store: Store
) -> None:
    await store.create_session("mid-dangle")
    await store.append_entries(
        "mid-dangle",
        [
            *dangling_session_entries(),
            MessageEntry(id="u2", parent_id="a1", message=user_message("never mind")),
            MessageEntry(
                id="a2", parent_id="u2", message=assistant_message(TextContent(text="ok"))
            ),
        ],
    )
    lm = ScriptedModel(["sure"])
    agent = await harness.open(lm, store=store, session_id="mid-dangle")
    events = await collect(await agent.run("next"))
    assert events[0].entries is not None and stored_texts(events[0].entries) == ["next"]
    stored = await store.load_entries("mid-dangle")
    assert not any(isinstance(e, MessageEntry) and e.synthetic for e in stored)
    assert stored_texts(stored) == ["go", "let me check", "never mind", "ok", "next", "sure"]
    request = lm.requests[0].messages
    assert [m.role for m in request] == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
        "user",
    ]


# -- model failures -----------------------------------------------------------------------------


async def test_retried_model_call_stores_nothing_for_the_failed_attempt(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel(
        [Reply(text="half an ans", error=ModelError("overloaded", retryable=True)), "whole"]
    )
    agent = await harness.open(lm, store=store, session_id="retry", model_retry=FAST_RETRY)
    stream = await agent.run("q")
    events = await collect(stream)
    assert texts(await stream.wait()) == ["whole"]
    assert kinds(events).count("message_end") == 1
    assert stored_texts(await store.load_entries("retry")) == ["q", "whole"]


async def test_retry_emits_a_new_message_start_in_process() -> None:
    lm = ScriptedModel(
        [Reply(text="half an ans", error=ModelError("overloaded", retryable=True)), "whole"]
    )
    agent = await new(model(lm), model_retry=RetryPolicy(initial_interval=0))
    events = await collect(await agent.run("q"))
    assert kinds(events, updates=False) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    updates = [e for e in events if e.agent is not None and e.agent.type == "message_update"]
    assert updates and updates[0].agent is not None
    assert updates[0].agent.message is not None
    assert updates[0].agent.message.text() == "half an "  # the failed attempt streamed ...
    assert len(await agent.store.load_entries(agent.session_id)) == 2  # ... and was not stored


async def test_final_model_failure_fails_the_run(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(
        [
            Reply(error=ModelError("overloaded 1", retryable=True)),
            Reply(error=ModelError("overloaded 2", retryable=True)),
            "unused",
        ]
    )
    agent = await harness.open(
        lm,
        store=store,
        session_id="model-fails",
        model_retry={"max_attempts": 2, "initial_interval": 0},
    )
    stream = await agent.run("q")
    seen: list[Event] = []
    with pytest.raises(ModelError) as info:
        async for event in stream.events():
            seen.append(event)
    assert "overloaded 2" in str(info.value)
    with pytest.raises(ModelError):
        await stream.wait()
    assert "agent_end" not in kinds(seen) and "message_end" not in kinds(seen)
    stored = await store.load_entries("model-fails")
    assert stored_texts(stored) == ["q"]  # the input stays stored
    assert agent.leaf_id == stored[0].id
    assert not agent.running


async def test_final_model_failure_is_that_model_error_in_process() -> None:
    error = ModelError("invalid api key", retryable=False)
    agent = await new(model(ScriptedModel([Reply(error=error)])))
    with pytest.raises(ModelError) as info:
        await (await agent.run("q")).wait()
    assert info.value is error


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
    started = asyncio.Event()

    @tool
    async def forever() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    calls = [ToolCall(id="f1", name="forever"), ToolCall(id="f2", name="forever")]
    agent = await harness.open(
        [Reply(text="working", tool_calls=calls), "unused"],
        store=store,
        session_id="cancel-tools",
        tools=[forever],
    )
    stream = await agent.run("go")
    await started.wait()
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
    assert stored[1].message.stop_reason == "tool_use"  # type: ignore[union-attr]
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
    started = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def gate() -> str:
        started.set()
        await release.wait()
        return "opened"

    agent = await harness.open(
        [Reply.call("gate", id="g1"), "after"], store=store, session_id="waiter", tools=[gate]
    )
    stream = await agent.run("go")
    waiter = asyncio.create_task(stream.wait())
    await started.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert agent.running
    release.set()
    assert texts(await stream.wait()) == ["", "opened", "after"]
    assert stored_texts(await store.load_entries("waiter")) == ["go", "", "opened", "after"]


# -- consumers ----------------------------------------------------------------------------------


async def test_cancelling_the_reading_task_does_not_cancel_the_run(
    harness: Harness, store: Store
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def gate() -> str:
        started.set()
        await release.wait()
        return "opened"

    agent = await harness.open(
        [Reply.call("gate", id="g1"), "after"], store=store, session_id="reader", tools=[gate]
    )
    stream = await agent.run("go")

    async def read() -> None:
        async for _ in stream.events():
            pass

    reader = asyncio.create_task(read())
    await started.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert agent.running
    release.set()
    assert texts(await stream.wait()) == ["", "opened", "after"]
    assert len(await store.load_entries("reader")) == 4


async def test_breaking_out_of_events_does_not_stop_persistence(
    harness: Harness, store: Store
) -> None:
    agent = await harness.open(
        [Reply.call("echo", {"text": "x"}, id="c1"), "done"],
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
        [Reply.call("echo", {"text": "x"}, id="c1"), "done"],
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


def test_text_input_helper_matches_str() -> None:
    assert text("x").message.text() == "x"


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
    started = asyncio.Event()

    @tool
    async def forever() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    gated = GatedCancelResults(store)
    agent = await new(
        model(ScriptedModel([Reply.call("forever", id="f1")])),
        store=gated,
        session_id="double-cancel",
        tools=(forever,),
    )
    stream = await agent.run("go")
    await started.wait()
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
