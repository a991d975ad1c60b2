"""Run-start repair (docs/design.md#repair-and-reconcile): dangling tool calls answered before the
run goes on."""

from __future__ import annotations

from collections.abc import Sequence

from durable_agent import (
    CustomEntry,
    MessageEntry,
    new,
)
from durable_agent.agent import AgentOptions, AgentRun, ModelLoop
from durable_agent.agent.approval import Resume
from durable_agent.ai import (
    Message,
    ScriptedModel,
    TextContent,
    ToolCall,
    assistant_message,
    tool_result_message,
    user_message,
)
from durable_agent.session import Store
from tests.durable_runs.support import (
    assert_chain,
    collect,
    dangling_session_entries,
    stored_texts,
    texts,
)
from tests.support.harness import Harness

# -- run-start repair ------------------------------------------------------------------------


async def test_carry_on_example_in_process(store: Store) -> None:
    await store.create_session("crashed")
    await store.append_entries("crashed", dangling_session_entries())
    histories: list[list[Message]] = []
    inputs: list[list[Message]] = []
    lm = ScriptedModel(["carrying on"])

    class Recording(ModelLoop):
        def run(self, messages: Sequence[Message], *, resume: Resume | None = None) -> AgentRun:
            inputs.append(list(messages))
            return super().run(messages, resume=resume)

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
    dangling = stored[1]
    assert isinstance(dangling, MessageEntry)
    assert repair.message.timestamp == dangling.message.timestamp
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
