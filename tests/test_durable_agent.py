"""The durable agent API (docs/design.md#handle-and-engine): new, factory, inputs, persist, append,
reads (close, the busy rule, persist failures and errors: tests/test_handle_lifecycle.py).

Scenarios that need only a scripted model, tools and plain options go through ``harness.open`` so
they also run on the Temporal executor; the rest (custom factories, ``factory=None``) are
in-process only and call ``new`` directly.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from durable_agent import (
    CompactionEntry,
    CustomEntry,
    EntryNotFoundError,
    EntryTooLargeError,
    InvalidRunInputError,
    InvalidSessionIdError,
    MessageEntry,
    NoFactoryError,
    SessionNotFoundError,
    StoreUnavailableError,
    ephemeral,
    file,
    image,
    meta,
    model,
    new,
    text,
)
from durable_agent.agent import AgentOptions, ModelLoop
from durable_agent.ai import (
    FileContent,
    ImageContent,
    ScriptedModel,
    TextContent,
    ToolCall,
    assistant_message,
    error_tool_result_message,
    user_message,
)
from durable_agent.session import Entry, RetentionStore, Store
from durable_agent.stores import MemoryStore
from tests.support.handles import WrappedStore, stored_texts, texts, too_large
from tests.support.harness import Harness

HEX16 = re.compile(r"[0-9a-f]{16}")


# -- new() ------------------------------------------------------------------------------------


async def test_new_without_store_or_session_id() -> None:
    a = await new(model(ScriptedModel([])))
    b = await new(model(ScriptedModel([])), session_id="")
    assert isinstance(a.store, MemoryStore) and isinstance(b.store, MemoryStore)
    assert a.store is not b.store  # private stores
    assert HEX16.fullmatch(a.session_id) and HEX16.fullmatch(b.session_id)
    assert a.session_id != b.session_id
    assert a.leaf_id == "" and a.entries() == []
    assert await a.store.load_entries(a.session_id) == []  # created


@pytest.mark.parametrize(
    "options",
    [{"bogus": 1}, {"history": []}, {"history": [user_message("x")]}],
)
async def test_new_refuses_unknown_options_and_history(options: dict[str, Any]) -> None:
    store = WrappedStore(MemoryStore())
    with pytest.raises(TypeError):
        await new(model(ScriptedModel([])), store=store, session_id="s1", **options)
    assert store.calls == []


@pytest.mark.parametrize(
    ("options", "field", "problem"),
    [
        ({"max_turns": 0}, "options.max_turns", "greater than or equal to 1"),
        ({"max_turns": -3}, "options.max_turns", "greater than or equal to 1"),
        ({"max_turns": "ten"}, "options.max_turns", "integer"),
        ({"approval_wait": -1}, "options.approval_wait", "greater than or equal to 0"),
        ({"approval_wait": float("inf")}, "options.approval_wait", "finite"),
        ({"system_prompt": 3}, "options.system_prompt", "string"),
        ({"model_retry": {"max_attempts": 0}}, "options.model_retry.max_attempts", "1"),
    ],
)
async def test_new_refuses_option_values_naming_the_option(
    options: dict[str, Any], field: str, problem: str
) -> None:
    """A value no run could use is refused by ``new()`` itself, as a run's input is: one line
    naming the option, an ``InvalidRunInputError`` (a ``ValueError``), before any I/O."""
    store = WrappedStore(MemoryStore())
    with pytest.raises(InvalidRunInputError) as caught:
        await new(model(ScriptedModel([])), store=store, session_id="s1", **options)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)
    assert store.calls == []


@pytest.mark.parametrize("bad", ["../etc", ".", "..", "a b", "x" * 201, "é", {"$ne": None}, 7])
async def test_new_validates_the_session_id_before_io(bad: Any) -> None:
    store = WrappedStore(MemoryStore())
    with pytest.raises(InvalidSessionIdError):
        await new(model(ScriptedModel([])), store=store, session_id=bad)
    assert store.calls == []


async def test_new_creates_then_resumes(harness: Harness, store: RetentionStore) -> None:
    agent = await harness.open(["hello"], store=store, session_id="resume-1")
    assert agent.session_id == "resume-1" and agent.leaf_id == ""
    if harness.name == "temporal":
        # on Temporal the first run creates it, once the worker has checked the agent
        with pytest.raises(SessionNotFoundError):
            await store.load_session("resume-1")
    await (await agent.run("hi")).wait()
    await agent.close()
    record = await store.load_session("resume-1")
    assert record.id == "resume-1" and record.parent_id is None

    again = await harness.open([], store=store, session_id="resume-1")
    stored = await store.load_entries("resume-1")
    assert again.leaf_id == stored[-1].id
    assert [e.id for e in again.entries()] == [e.id for e in stored]
    assert texts(again.messages()) == ["hi", "hello"]
    # resuming touched nothing: the record is unchanged
    assert await store.load_session("resume-1") == record


async def test_new_lost_create_race_resumes(store: RetentionStore) -> None:
    class RacingStore(WrappedStore):
        """The first load misses; another opener creates the session before our create."""

        raced = False

        async def load_entries(self, session_id: str) -> list[Entry]:
            if not self.raced:
                self.raced = True
                await self.inner.create_session(session_id)
                await self.inner.append_entries(
                    session_id,
                    [MessageEntry(id="e1", message=user_message("theirs"))],
                )
                raise SessionNotFoundError(session_id)
            return await super().load_entries(session_id)

    racing = RacingStore(store)
    agent = await new(model(ScriptedModel([])), store=racing, session_id="race")
    assert racing.calls == ["create_session", "load_entries"]
    assert agent.leaf_id == "e1"
    assert texts(agent.messages()) == ["theirs"]


async def test_new_propagates_other_load_errors() -> None:
    store = WrappedStore(MemoryStore())
    boom = StoreUnavailableError("down")
    store.fail_loads.append(boom)
    with pytest.raises(StoreUnavailableError) as info:
        await new(model(ScriptedModel([])), store=store, session_id="s1")
    assert info.value is boom
    assert store.calls == ["load_entries"]


async def test_new_never_writes_or_repairs(store: RetentionStore) -> None:
    await store.create_session("dangling")
    await store.append_entries(
        "dangling",
        [
            MessageEntry(id="u1", message=user_message("go")),
            MessageEntry(
                id="a1",
                parent_id="u1",
                message=assistant_message(ToolCall(id="call-9", name="echo")),
            ),
        ],
    )
    wrapped = WrappedStore(store)
    agent = await new(model(ScriptedModel([])), store=wrapped, session_id="dangling")
    assert "append_entries" not in wrapped.calls and "create_session" not in wrapped.calls
    assert len(agent.messages()) == 3  # repaired in the view only
    assert len(await store.load_entries("dangling")) == 2


async def test_two_handles_grow_sibling_branches(harness: Harness, store: Store) -> None:
    """Handles are untracked: each appends from its own leaf (docs/design.md#handle-and-engine)."""
    seed = await harness.open(["seed answer"], store=store, session_id="shared")
    await (await seed.run("seed question")).wait()
    answer_id = seed.leaf_id
    a = await harness.open(["answer a"], store=store, session_id="shared")
    b = await harness.open(["answer b"], store=store, session_id="shared")
    assert a.leaf_id == b.leaf_id == answer_id
    await (await a.run("question a")).wait()
    await (await b.run("question b")).wait()
    stored = await store.load_entries("shared")
    assert len(stored) == 6
    children = [e for e in stored if e.parent_id == answer_id]
    assert len(children) == 2
    assert sorted(stored_texts(children)) == ["question a", "question b"]
    assert texts(a.messages()) == ["seed question", "seed answer", "question a", "answer a"]
    assert texts(b.messages()) == ["seed question", "seed answer", "question b", "answer b"]
    # b never saw a's entries: it cannot branch to them
    with pytest.raises(EntryNotFoundError):
        await b.branch(a.leaf_id)


# -- the factory ------------------------------------------------------------------------------


class CountingLoop(ModelLoop):
    closed = 0

    async def aclose(self) -> None:
        CountingLoop.closed += 1
        await super().aclose()


async def test_factory_called_once_per_run_with_base_options_plus_history() -> None:
    lm = ScriptedModel(["a1", "a2"])
    seen: list[AgentOptions] = []
    CountingLoop.closed = 0

    def factory(options: AgentOptions) -> ModelLoop:
        seen.append(options)
        return CountingLoop(lm, options)

    agent = await new(factory, system_prompt="sys", max_turns=3)
    await (await agent.run("q1")).wait()
    assert len(seen) == 1 and CountingLoop.closed == 1
    await (await agent.run("q2")).wait()
    assert len(seen) == 2 and CountingLoop.closed == 2
    first, second = seen
    assert first.history == []  # earlier turns only: not this run's input
    assert texts(second.history) == ["q1", "a1"]
    base = AgentOptions(system_prompt="sys", max_turns=3)
    for options in seen:
        assert options.model_copy(update={"history": []}) == base


async def test_coroutine_factory() -> None:
    lm = ScriptedModel(["pong"])

    async def factory(options: AgentOptions) -> ModelLoop:
        await asyncio.sleep(0)
        return ModelLoop(lm, options)

    agent = await new(factory)
    assert texts(await (await agent.run("ping")).wait()) == ["pong"]


async def test_factory_exception_propagates_and_stores_nothing(store: Store) -> None:
    boom = RuntimeError("cannot build")
    calls = 0

    def factory(options: AgentOptions) -> ModelLoop:
        nonlocal calls
        calls += 1
        raise boom

    agent = await new(factory, store=store, session_id="factory-fails")
    await agent.append("kept")
    leaf = agent.leaf_id
    stream = await agent.run("lost")
    with pytest.raises(RuntimeError) as info:
        await stream.wait()
    assert info.value is boom
    assert calls == 1
    assert agent.leaf_id == leaf and not agent.running
    assert stored_texts(await store.load_entries("factory-fails")) == ["kept"]
    assert len(agent.entries()) == 1


async def test_no_factory_records_but_never_runs(store: Store) -> None:
    agent = await new(None, store=store, session_id="records")
    assert agent.leaf_id == ""
    stream = await agent.run("hi")
    with pytest.raises(NoFactoryError):
        await stream.wait()
    assert not agent.running and agent.leaf_id == ""
    assert await store.load_entries("records") == []
    # everything else works, e.g. a manual repair of a dangling call
    await agent.append("go", MessageEntry(message=assistant_message(ToolCall(id="c1", name="t"))))
    assert texts(agent.messages())[-1] == "tool execution interrupted"
    (result,) = await agent.append(
        MessageEntry(message=error_tool_result_message("c1", "t", "fixed by hand"))
    )
    assert agent.leaf_id == result.id
    assert texts(agent.messages()) == ["go", "", "fixed by hand"]
    assert len(await store.load_entries("records")) == 3


async def test_factory_must_be_callable() -> None:
    with pytest.raises(TypeError):
        await new(42)  # type: ignore[arg-type]


# -- inputs -----------------------------------------------------------------------------------


def test_input_constructors() -> None:
    img = ImageContent(data="aGk=", mime_type="image/png")
    doc = FileContent(url="https://example.com/a.pdf", mime_type="application/pdf")
    for entry in (text("t"), image("i", img), file("f", doc)):
        assert isinstance(entry, MessageEntry)
        assert entry.id == "" and entry.parent_id is None
        assert (entry.meta, entry.ephemeral, entry.synthetic) == (False, False, False)
        assert entry.message.role == "user"
    assert image("i", img).message.content == [TextContent(text="i"), img]
    assert file("f", doc).message.content == [TextContent(text="f"), doc]

    eph = ephemeral(text("nudge"))
    assert eph.ephemeral and not eph.meta and eph.message.text() == "nudge"
    eph_meta = ephemeral(MessageEntry(message=user_message("ctx"), meta=True))
    assert eph_meta.ephemeral and eph_meta.meta  # meta kept
    m = meta("context")
    assert m.meta and not m.ephemeral and m.message.text() == "context"


# -- persist and append -----------------------------------------------------------------------


async def test_persist_example_a_eph_b(store: Store) -> None:
    agent = await new(None, store=store, session_id="persist")
    (first,) = await agent.append("L")
    leaf = agent.leaf_id
    assert leaf == first.id
    a, eph, b = await agent.append(text("A"), ephemeral(text("Eph")), text("B"))
    assert a.parent_id == leaf
    assert eph.parent_id == a.id
    assert b.parent_id == a.id
    assert agent.leaf_id == b.id
    assert a.created_at == eph.created_at == b.created_at
    assert all(HEX16.fullmatch(e.id) for e in (a, eph, b))
    assert stored_texts(await store.load_entries("persist")) == ["L", "A", "B"]
    assert stored_texts(agent.entries()) == ["L", "A", "Eph", "B"]  # the log keeps ephemeral
    assert texts(agent.messages()) == ["L", "A", "B"]  # ... but it is not on the path


async def test_append_overwrites_headers_and_returns_copies_in_order(store: Store) -> None:
    agent = await new(None, store=store, session_id="headers")
    given = MessageEntry(id="mine", parent_id="elsewhere", message=user_message("x"))
    custom = CustomEntry(kind="note")
    copies = await agent.append(given, "plain", custom)
    assert [type(c) for c in copies] == [MessageEntry, MessageEntry, CustomEntry]
    assert copies[0].id != "mine" and copies[0].parent_id is None
    assert copies[1].parent_id == copies[0].id and copies[2].parent_id == copies[1].id
    assert len({c.created_at for c in copies}) == 1
    assert copies[0].created_at != given.created_at or copies[0].id != given.id
    assert await store.load_entries("headers") == copies


async def test_append_ephemeral_only_on_fresh_session(store: Store) -> None:
    agent = await new(None, store=store, session_id="eph-only")
    (copy,) = await agent.append(ephemeral("just for now"))
    assert copy.id and copy.parent_id is None
    assert len(agent.entries()) == 1 and agent.leaf_id == ""
    assert await store.load_entries("eph-only") == []
    with pytest.raises(EntryNotFoundError):
        await agent.branch(copy.id)


async def test_appended_custom_entry_is_leaf_in_transcript_not_model_view(store: Store) -> None:
    agent = await new(None, store=store, session_id="custom")
    await agent.append("hi")
    (note,) = await agent.append(CustomEntry(kind="title_changed"))
    assert agent.leaf_id == note.id
    assert agent.transcript()[-1] == note
    assert texts(agent.messages()) == ["hi"]


async def test_append_accepts_any_kind_and_reads_follow(store: Store) -> None:
    agent = await new(None, store=store, session_id="kinds")
    await agent.append("q", meta("hidden context"))
    await agent.append(MessageEntry(message=assistant_message(TextContent(text="a"))))
    (c,) = await agent.append(CompactionEntry(summary="so far", first_kept_id=""))
    assert isinstance(c, CompactionEntry)
    assert texts(agent.messages()) == ["so far"]
    assert [type(e).__name__ for e in agent.transcript()] == [
        "MessageEntry",
        "MessageEntry",
        "CompactionEntry",
    ]


async def test_append_store_error_propagates_and_changes_nothing(store: RetentionStore) -> None:
    wrapped = WrappedStore(store)
    agent = await new(None, store=wrapped, session_id="append-fails")
    await agent.append("one")
    before = (agent.entries(), agent.leaf_id)
    boom = too_large("append-fails")
    wrapped.fail_appends.append(boom)
    with pytest.raises(EntryTooLargeError) as info:
        await agent.append("two", ephemeral("x"))
    assert info.value is boom  # propagated, not wrapped
    assert (agent.entries(), agent.leaf_id) == before
    assert stored_texts(await store.load_entries("append-fails")) == ["one"]


async def test_run_and_append_accept_str(harness: Harness, store: Store) -> None:
    agent = await harness.open(["reply"], store=store, session_id="strs")
    (entry,) = await agent.append("appended")
    assert isinstance(entry, MessageEntry) and entry.message.role == "user"
    await (await agent.run("asked")).wait()
    assert texts(agent.messages()) == ["appended", "asked", "reply"]


async def test_append_refuses_non_entries() -> None:
    agent = await new(None)
    with pytest.raises(TypeError):
        await agent.append(user_message("a message is not an entry"))  # type: ignore[arg-type]


# -- reads --------------------------------------------------------------------------------------


async def test_reads(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a1"], store=store, session_id="reads")
    await agent.append(meta("background"))
    await (await agent.run("q1")).wait()
    log = agent.entries()
    log.clear()  # a copy
    assert len(agent.entries()) == 3
    assert [e.message.text() for e in agent.transcript() if isinstance(e, MessageEntry)] == [
        "q1",
        "a1",
    ]
    assert texts(agent.messages()) == ["background", "q1", "a1"]
    assert agent.session_id == "reads"


async def test_dangling_call_example_5_1(store: Store) -> None:
    lm = ScriptedModel(["ok"])
    agent = await new(model(lm), store=store, session_id="ex51")
    await agent.append(
        "go",
        MessageEntry(message=assistant_message(ToolCall(id="call-9", name="echo"))),
    )
    view = agent.messages()
    assert len(view) == 3
    assert view[2].role == "tool_result" and view[2].tool_call_id == "call-9"
    assert view[2].is_error
    await (await agent.run("next")).wait()
    assert len(lm.requests[0].messages) == 4


async def test_a_handle_and_its_run_stream_say_what_they_are_in_their_repr() -> None:
    """What a log line, a debugger or a REPL shows: the session, where it is, and whether a
    run goes; the run's ID. The default repr showed a memory address only."""
    from durable_agent import Reply, ScriptedModel, model, new

    agent = await new(model(ScriptedModel([Reply(text="hi", delay=0.2)])), session_id="user-42")
    assert repr(agent) == "<Agent session_id='user-42' leaf_id='' idle>"
    stream = await agent.run("hello", run_id="op-1")
    assert repr(stream) == "<RunStream run_id='op-1' running>"
    assert repr(agent) == f"<Agent session_id='user-42' leaf_id={agent.leaf_id!r} running>"
    await stream.wait()
    assert repr(stream) == "<RunStream run_id='op-1' ended>"
    await agent.close()
    assert repr(agent) == f"<Agent session_id='user-42' leaf_id={agent.leaf_id!r} closed>"
