"""``compact`` (docs/design.md#compaction), decisions 1, 9 and 13."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import pytest

from durable_agent import (
    AgentClosedError,
    CompactError,
    CompactionEntry,
    Event,
    MessageEntry,
    ModelError,
    NoFactoryError,
    RunActiveError,
    meta,
    model,
    new,
)
from durable_agent.agent import AgentEvent, AgentOptions, AgentRun, ModelLoop
from durable_agent.agent.approval import Resume
from durable_agent.ai import (
    ImageContent,
    Message,
    ModelEvent,
    ModelRequest,
    Reply,
    ScriptedModel,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    assistant_message,
    tool_result_message,
)
from durable_agent.durable import DEFAULT_COMPACT_PROMPT, estimate_tokens
from durable_agent.session import Entry, SessionRecord, Store
from tests.support.harness import Harness

PROMPT = (
    "Summarize the conversation so far. Preserve every fact, decision, and open question in a "
    "compact form."
)


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() if isinstance(e, MessageEntry) else type(e).__name__ for e in entries]


def reply(text: str) -> MessageEntry:
    return MessageEntry(message=assistant_message(TextContent(text=text)))


class CountingStore:
    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.appends = 0

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        self.appends += 1
        await self.inner.append_entries(session_id, entries)


def test_default_prompt_is_exact() -> None:
    assert DEFAULT_COMPACT_PROMPT == PROMPT
    assert "\n" not in PROMPT


async def test_two_turns_keep_one_example(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["a1", "a2", "the summary"])
    agent = await harness.open(lm, store=store, session_id="compact-ex", system_prompt="sys")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    before = await store.load_entries("compact-ex")
    a2_id = agent.leaf_id

    entry = await agent.compact(keep_turns=1)
    assert isinstance(entry, CompactionEntry)
    summarizer = lm.requests[-1]
    assert texts(summarizer.messages) == ["q1", "a1", PROMPT]
    assert summarizer.tools == []  # no tools
    assert summarizer.system_prompt == "sys"  # the system prompt is kept

    stored = await store.load_entries("compact-ex")
    assert stored_texts(stored) == ["q1", "a1", "q2", "a2", "CompactionEntry"]
    assert stored[-1] == entry
    assert entry.summary == "the summary"
    assert entry.first_kept_id == before[2].id  # q2
    assert entry.parent_id == a2_id and agent.leaf_id == entry.id
    assert texts(agent.messages()) == ["the summary", "q2", "a2"]
    assert agent.messages()[0].timestamp == entry.created_at  # decision 13
    assert agent.messages()[0].role == "user"

    # nothing is deleted: branching before C restores the full view
    await agent.branch(a2_id)
    assert texts(agent.messages()) == ["q1", "a1", "q2", "a2"]


async def test_keep_zero_summarizes_everything(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["a1", "a2", "all of it"])
    agent = await harness.open(lm, store=store, session_id="compact-all")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    entry = await agent.compact()
    assert entry is not None and entry.first_kept_id == ""
    assert texts(lm.requests[-1].messages) == ["q1", "a1", "q2", "a2", PROMPT]
    assert texts(agent.messages()) == ["all of it"]
    # the next run continues from the summary
    lm2 = ScriptedModel(["after"])
    again = await harness.open(lm2, store=store, session_id="compact-all")
    await (await again.run("q3")).wait()
    assert texts(lm2.requests[0].messages) == ["all of it", "q3"]


async def test_custom_prompt(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["a1", "short"])
    agent = await harness.open(lm, store=store, session_id="compact-prompt")
    await (await agent.run("q1")).wait()
    await agent.compact(prompt="TL;DR please")
    assert texts(lm.requests[-1].messages)[-1] == "TL;DR please"


async def test_summarizer_options_are_base_without_tools_one_turn() -> None:
    from durable_agent.ai import tool

    @tool
    async def noop() -> str:
        return ""

    seen: list[AgentOptions] = []
    lm = ScriptedModel(["a1", "sum"])

    def factory(options: AgentOptions) -> ModelLoop:
        seen.append(options)
        return ModelLoop(lm, options)

    agent = await new(factory, tools=(noop,), system_prompt="sys", max_turns=7)
    await (await agent.run("q1")).wait()
    await agent.compact()
    run_options, summarizer_options = seen
    assert run_options.tools == (noop,) and run_options.max_turns == 7
    assert summarizer_options.tools == () and summarizer_options.max_turns == 1
    assert summarizer_options.system_prompt == "sys"
    assert texts(summarizer_options.history) == ["q1", "a1"]


# -- turn starts and no-ops ---------------------------------------------------------------------


async def test_noop_returns_none_and_calls_nothing(store: Store) -> None:
    calls = 0
    published: list[Event] = []

    def factory(options: AgentOptions) -> ModelLoop:
        nonlocal calls
        calls += 1
        return ModelLoop(ScriptedModel(["x"]), options)

    counting = CountingStore(store)
    agent = await new(factory, store=counting, session_id="noop", publisher=published.append)
    published.clear()
    assert await agent.compact() is None  # fresh
    await agent.append(meta("context only"), reply("hello"))
    appends = counting.appends
    assert await agent.compact() is None  # meta user messages are not turn starts
    await agent.append("q1", reply("a1"))
    appends = counting.appends
    assert await agent.compact(keep_turns=1) is None
    assert await agent.compact(keep_turns=5) is None
    assert calls == 0 and counting.appends == appends and published == []
    assert not agent.state.compacting


async def test_turn_starts_count_before_earlier_compactions(store: Store) -> None:
    lm = ScriptedModel(["first summary", "second summary"])
    agent = await new(model(lm), store=store, session_id="nested")
    await agent.append("q1", reply("a1"))
    c1 = await agent.compact()
    assert c1 is not None
    await agent.append("q2", reply("a2"))
    (q3,) = await agent.append("q3")
    await agent.append(reply("a3"))
    c2 = await agent.compact(keep_turns=1)  # three turn starts on the path, q1 included
    assert c2 is not None and c2.first_kept_id == q3.id
    # the summarizer saw the model view of the prefix: the first summary, not q1/a1
    assert texts(lm.requests[-1].messages) == ["first summary", "q2", "a2", PROMPT]
    assert texts(agent.messages()) == ["second summary", "q3", "a3"]


async def test_compacting_again_with_nothing_new_before_the_kept_turns_does_nothing(
    harness: Harness, store: Store
) -> None:
    """A compaction whose prefix would be the last one's summary alone (the same
    ``keep_turns`` again, or one reaching back past the last one's kept turns, which it never
    brings back) asks the model nothing and stores nothing: a summary of a summary is the
    same summary, paid for again."""
    lm = ScriptedModel(["a1", "a2", "first summary", "a3", "a4", "second summary"])
    agent = await harness.open(lm, store=store, session_id="compact-again")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    assert await agent.compact(keep_turns=1) is not None
    calls, view = len(lm.requests), texts(agent.messages())
    assert view == ["first summary", "q2", "a2"]
    assert await agent.compact(keep_turns=1) is None
    assert await agent.compact(keep_turns=2) is None  # q1 is summarized: not brought back
    await (await agent.run("q3")).wait()
    assert await agent.compact(keep_turns=2) is None  # q2 and q3 kept: nothing new before
    assert len(lm.requests) == calls + 1  # the run's call alone

    await (await agent.run("q4")).wait()
    entry = await agent.compact(keep_turns=2)
    assert entry is not None
    assert texts(lm.requests[-1].messages) == ["first summary", "q2", "a2", PROMPT]
    assert texts(agent.messages()) == ["second summary", "q3", "a3", "q4", "a4"]
    reopened = await harness.open([], store=store, session_id="compact-again")
    assert reopened.leaf_id == agent.leaf_id and reopened.messages() == agent.messages()


async def test_keep_turns_must_not_be_negative() -> None:
    agent = await new(model(ScriptedModel([])))
    await agent.append("q", reply("a"))
    with pytest.raises(ValueError):
        await agent.compact(keep_turns=-1)


# -- tokens_before ------------------------------------------------------------------------------


async def test_tokens_before_with_reported_usage(store: Store) -> None:
    agent = await new(model(ScriptedModel(["s"])), store=store, session_id="tokens-usage")
    call = ToolCall(id="c1", name="echo", arguments={"text": "hi"})
    anchored = assistant_message(TextContent(text="ignored text"))
    anchored = anchored.model_copy(
        update={"usage": Usage(input=100, output=20, cache_read=10, cache_write=5, reasoning=7)}
    )
    zero_input = assistant_message(ThinkingContent(thinking="hmm"), call).model_copy(
        update={"usage": Usage(input=0, output=50)}
    )
    image = ImageContent(data="aGVsbG8=", mime_type="image/png")
    await agent.append(
        "q1 is here",
        MessageEntry(message=anchored),
        "hello world!",
        MessageEntry(message=zero_input),
        MessageEntry(message=tool_result_message("c1", "echo", TextContent(text="hi"), image)),
        reply("xyz"),
    )
    args = json.dumps({"text": "hi"}, separators=(",", ":"))
    chars = len("hello world!") + len("hmm") + len("echo") + len(args) + len("hi") + len("xyz")
    expected = (100 + 10 + 5 + 20) + math.ceil(chars / 4)
    assert estimate_tokens(agent.messages()) == expected
    entry = await agent.compact()
    assert entry is not None and entry.tokens_before == expected


async def test_tokens_before_without_usage(store: Store) -> None:
    agent = await new(model(ScriptedModel(["s"])), store=store, session_id="tokens-plain")
    await agent.append("q1", reply("answer"), "q2", reply("x"))
    entry = await agent.compact(keep_turns=1)
    assert entry is not None
    assert entry.tokens_before == math.ceil(len("q1answerq2x") / 4) == 3


async def test_tokens_before_from_run_usage(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(
        [
            Reply(text="a1", usage=Usage(input=50, output=7)),
            Reply(text="a2", usage=Usage(input=80, output=9, cache_read=3, cache_write=2)),
            "summary",
        ]
    )
    agent = await harness.open(lm, store=store, session_id="tokens-run")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    await agent.append("tail 12 char")
    entry = await agent.compact(keep_turns=1)
    assert entry is not None and entry.tokens_before == 94 + 3


async def test_tokens_before_skips_usage_reported_before_an_earlier_compaction(
    harness: Harness, store: Store
) -> None:
    """A kept reply's usage measured the context before the compaction that kept it: the
    next compaction estimated 10030 tokens for a view of 17 characters."""
    lm = ScriptedModel(
        [
            "a1",
            Reply(text="a2", usage=Usage(input=10_020, output=10)),
            "first summary",
            "a3",
            "second summary",
        ]
    )
    agent = await harness.open(lm, store=store, session_id="tokens-after-compaction")
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    first = await agent.compact(keep_turns=1)
    assert first is not None and first.tokens_before == 10_030
    assert texts(agent.messages()) == ["first summary", "q2", "a2"]
    await (await agent.run("q3")).wait()

    second = await agent.compact(keep_turns=1)

    assert second is not None
    assert second.tokens_before == math.ceil(len("first summaryq2a2q3a3") / 4) == 6


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        Reply(error=ModelError("invalid request", retryable=False)),
        Reply(text="   "),
        Reply(text=""),
        Reply(text="half", stop_reason="aborted"),
        Reply(text="broken", stop_reason="error"),
    ],
    ids=["model-error", "blank", "empty", "aborted", "error"],
)
async def test_summarizer_failures_raise_compact_error(
    bad: Reply, harness: Harness, store: Store
) -> None:
    agent = await harness.open(["a1", bad], store=store, session_id="compact-bad")
    await (await agent.run("q1")).wait()
    leaf = agent.leaf_id
    with pytest.raises(CompactError):
        await agent.compact()
    assert agent.leaf_id == leaf
    assert stored_texts(await store.load_entries("compact-bad")) == ["q1", "a1"]
    # the flag is cleared: the agent is usable
    await agent.append("still works")


async def test_summarizer_model_error_is_chained() -> None:
    error = ModelError("invalid request", retryable=False)
    agent = await new(model(ScriptedModel([Reply(error=error)])))
    await agent.append("q", reply("a"))
    with pytest.raises(CompactError) as info:
        await agent.compact()
    assert info.value.__cause__ is error


async def test_summarizer_factory_failure_is_compact_error() -> None:
    boom = RuntimeError("no model configured")

    def factory(options: AgentOptions) -> ModelLoop:
        raise boom

    agent = await new(factory)
    await agent.append("q", reply("a"))
    with pytest.raises(CompactError) as info:
        await agent.compact()
    assert info.value.__cause__ is boom


async def test_summarizer_without_assistant_message_and_loop_closed() -> None:
    closed: list[str] = []

    class Silent:
        def run(self, messages: Sequence[Message], *, resume: Resume | None = None) -> AgentRun:
            async def events() -> AsyncGenerator[AgentEvent, None]:
                return
                yield

            return AgentRun(events())

        async def aclose(self) -> None:
            closed.append("closed")

    agent = await new(lambda options: Silent())
    await agent.append("q", reply("a"))
    with pytest.raises(CompactError):
        await agent.compact()
    assert closed == ["closed"]


async def test_summarizer_loop_is_closed_on_success() -> None:
    closed: list[str] = []
    lm = ScriptedModel(["sum"])

    class Closing(ModelLoop):
        async def aclose(self) -> None:
            closed.append("closed")
            await super().aclose()

    agent = await new(lambda options: Closing(lm, options))
    await agent.append("q", reply("a"))
    assert await agent.compact() is not None
    assert closed == ["closed"]


async def test_no_factory(store: Store) -> None:
    agent = await new(None, store=store, session_id="compact-nofactory")
    assert await agent.compact() is None  # nothing to do: no factory needed
    await agent.append("q", reply("a"))
    with pytest.raises(NoFactoryError):
        await agent.compact()
    assert len(await store.load_entries("compact-nofactory")) == 2


async def test_closed_agent_refuses_compaction() -> None:
    agent = await new(model(ScriptedModel(["s"])))
    await agent.append("q", reply("a"))
    await agent.close()
    with pytest.raises(AgentClosedError):
        await agent.compact()


async def test_busy_rule_during_compaction() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()
    inner = ScriptedModel(["the summary"])

    class Gated:
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            entered.set()
            await release.wait()
            async for event in inner.stream(request):
                yield event

    agent = await new(model(Gated()))
    (q,) = await agent.append("q")
    await agent.append(reply("a"))
    task = asyncio.create_task(agent.compact())
    await entered.wait()
    with pytest.raises(RunActiveError):
        await agent.run("x")
    with pytest.raises(RunActiveError):
        await agent.append("x")
    with pytest.raises(RunActiveError):
        await agent.branch(q.id)
    with pytest.raises(RunActiveError):
        await agent.compact()
    assert texts(agent.messages()) == ["q", "a"]  # reads work
    child = await agent.fork()  # and so does fork
    assert texts(child.messages()) == ["q", "a"]
    release.set()
    entry = await task
    assert entry is not None and entry.summary == "the summary"
    await agent.append("after")
