"""The contract every store meets (docs/design.md#store-contract), run against each kind in
STORE_KINDS.

Everything here goes through the ``store`` fixture only, so a new store kind (Mongo) runs the same
suite by being added to ``STORE_KINDS`` in conftest.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

import pytest
from pydantic import Field

from durable_agent.ai import (
    Cost,
    FileContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolOutput,
    Usage,
    tool_result_message,
    user_file_message,
    user_image_message,
    user_message,
)
from durable_agent.session import (
    AppendFeed,
    CompactionEntry,
    CustomEntry,
    Entry,
    EntryConflictError,
    EntryEncodeError,
    EntryTooLargeError,
    GuardedStore,
    InvalidSessionIdError,
    MessageEntry,
    ParentNotFoundError,
    RetentionStore,
    SeqStore,
    SessionExistsError,
    SessionNotFoundError,
    SessionRecord,
    Store,
    encode_entry,
    register_custom,
)
from durable_agent.session.deltas import Delta, DeltaKey, LiveStore
from durable_agent.stores import RememberingStore
from tests.support.conformance import T0, fresh, msg, wires


@register_custom("conformance-note")
class Note(CustomEntry):
    """A registered custom kind with an aliased field, to check both wire key forms survive."""

    text: str
    tags: list[str] = Field(default_factory=list)
    level: int = Field(default=0, alias="lvl")


class RecordStore(Store, Protocol):
    """The protocol plus ``load_session``, which every concrete store has (outside the protocol)."""

    async def load_session(self, session_id: str) -> SessionRecord: ...


def rec(store: Store) -> RecordStore:
    return cast(RecordStore, store)


# -- create / load / exists ------------------------------------------------------------------------


async def test_new_session_has_no_entries(store: Store) -> None:
    record = await store.create_session("s1")
    assert record.id == "s1"
    assert await store.load_entries("s1") == []
    assert await rec(store).load_session("s1") == record


async def test_record_fields(store: Store) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    record = await store.create_session("child", parent_id="source")
    after = datetime.now(UTC) + timedelta(seconds=1)
    assert set(SessionRecord.model_fields) == {"id", "parent_id", "created_at"}
    assert record.parent_id == "source"
    assert record.created_at.tzinfo is not None
    assert record.created_at.utcoffset() == timedelta(0)
    assert before <= record.created_at <= after
    loaded = await rec(store).load_session("child")
    assert loaded == record
    assert loaded.created_at.utcoffset() == timedelta(0)


async def test_root_session_has_no_parent(store: Store) -> None:
    await store.create_session("a")
    await store.create_session("b", parent_id="")
    assert (await rec(store).load_session("a")).parent_id is None
    assert (await rec(store).load_session("b")).parent_id is None


async def test_create_twice_raises_and_keeps_the_first(store: Store) -> None:
    first = await store.create_session("s1", parent_id="p1")
    await store.append_entries("s1", [msg("e1")])
    with pytest.raises(SessionExistsError):
        await store.create_session("s1")
    with pytest.raises(SessionExistsError):
        await store.create_session("s1", parent_id="p2")
    assert await rec(store).load_session("s1") == first
    assert wires(await store.load_entries("s1")) == wires([msg("e1")])


async def test_appends_do_not_touch_the_record(store: Store) -> None:
    record = await store.create_session("s1", parent_id="p")
    await store.append_entries("s1", [msg("e1"), msg("e2", parent="e1")])
    assert await rec(store).load_session("s1") == record


async def test_unknown_session(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("nope")
    with pytest.raises(SessionNotFoundError):
        await rec(store).load_session("nope")
    with pytest.raises(SessionNotFoundError):
        await store.append_entries("nope", [msg("e1")])
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("nope")  # the failed append created nothing


async def test_zero_entries(store: Store) -> None:
    await fresh(store)
    await store.append_entries("s1", [msg("e1")])
    await store.append_entries("s1", [])
    assert wires(await store.load_entries("s1")) == wires([msg("e1")])
    with pytest.raises(SessionNotFoundError):
        await store.append_entries("nope", [])


async def test_sessions_are_isolated(store: Store) -> None:
    await fresh(store, "a")
    await fresh(store, "b")
    await store.append_entries("a", [msg("e1", "in a")])
    await store.append_entries("b", [msg("e1", "in b")])  # same ID, other session: no conflict
    for sid, text in (("a", "in a"), ("b", "in b")):
        [entry] = await store.load_entries(sid)
        assert isinstance(entry, MessageEntry) and entry.message.text() == text


async def test_loads_return_copies(store: Store) -> None:
    await fresh(store)
    await store.append_entries("s1", [msg("e1")])
    loaded = await store.load_entries("s1")
    loaded.append(msg("intruder"))
    loaded.clear()
    assert wires(await store.load_entries("s1")) == wires([msg("e1")])


# -- order and leaf --------------------------------------------------------------------------------


async def test_append_order_not_time_or_tree_order(store: Store) -> None:
    await fresh(store)
    later, earlier = T0 + timedelta(hours=1), T0 - timedelta(hours=1)
    batch1 = [msg("z", at=later), msg("a", parent="z", at=earlier)]
    batch2 = [msg("m", parent="z", at=T0), msg("b", parent="m", at=earlier)]
    await store.append_entries("s1", batch1)
    await store.append_entries("s1", batch2)
    loaded = await store.load_entries("s1")
    assert [e.id for e in loaded] == ["z", "a", "m", "b"]
    assert loaded[-1].id == "b"  # the resume leaf: last in append order
    assert wires(loaded) == wires(batch1 + batch2)


async def test_an_entry_whose_parent_is_not_held_is_refused(store: Store) -> None:
    """A parent must be stored or in the batch (anywhere in it); an append naming another
    writes nothing of its batch and says which entry and parent."""
    await fresh(store)
    await store.append_entries("s1", [msg("b", parent="a"), msg("a")])
    with pytest.raises(ParentNotFoundError) as caught:
        await store.append_entries("s1", [msg("c", parent="b"), msg("d", parent="never-stored")])
    assert (caught.value.entry_id, caught.value.parent_id) == ("d", "never-stored")
    assert isinstance(caught.value, SessionNotFoundError)  # the session it continues is not here
    await store.append_entries("s1", [msg("c", parent="b")])
    assert [e.id for e in await store.load_entries("s1")] == ["b", "a", "c"]


# -- idempotency -----------------------------------------------------------------------------------


async def test_identical_reappend_is_skipped(store: Store) -> None:
    await fresh(store)
    a, b, c = msg("a"), msg("b", parent="a"), msg("c", parent="b")
    await store.append_entries("s1", [a, b])
    await store.append_entries("s1", [a, b])
    await store.append_entries("s1", [b, c])
    assert wires(await store.load_entries("s1")) == wires([a, b, c])


async def test_differing_reappend_conflicts_and_writes_nothing(store: Store) -> None:
    await fresh(store)
    a = msg("a", "original")
    await store.append_entries("s1", [a])
    with pytest.raises(EntryConflictError) as info:
        await store.append_entries("s1", [msg("new1"), msg("a", "changed"), msg("new2")])
    assert info.value.session_id == "s1"
    assert info.value.entry_id == "a"
    assert wires(await store.load_entries("s1")) == wires([a])


async def test_conflict_on_header_only_change(store: Store) -> None:
    await fresh(store)
    await store.append_entries("s1", [msg("a")])
    with pytest.raises(EntryConflictError):
        await store.append_entries("s1", [msg("a", at=T0 + timedelta(microseconds=1))])
    with pytest.raises(EntryConflictError):
        await store.append_entries("s1", [msg("a", parent="other")])


async def test_repeat_within_batch_identical_is_stored_once(store: Store) -> None:
    await fresh(store)
    await store.append_entries("s1", [msg("a"), msg("b"), msg("a")])
    assert [e.id for e in await store.load_entries("s1")] == ["a", "b"]


async def test_repeat_within_batch_differing_writes_nothing(store: Store) -> None:
    await fresh(store)
    with pytest.raises(EntryConflictError) as info:
        await store.append_entries("s1", [msg("a", "one"), msg("b"), msg("a", "two")])
    assert info.value.entry_id == "a"
    assert await store.load_entries("s1") == []


async def test_repeat_within_batch_compares_with_first(store: Store) -> None:
    await fresh(store)
    # The third copy equals the second but not the first: still a conflict.
    with pytest.raises(EntryConflictError):
        await store.append_entries("s1", [msg("a", "one"), msg("a", "two"), msg("a", "two")])
    assert await store.load_entries("s1") == []


async def test_empty_entry_id_is_a_value_error(store: Store) -> None:
    await fresh(store)
    with pytest.raises(ValueError):
        await store.append_entries("s1", [msg("ok"), msg("")])
    assert await store.load_entries("s1") == []


# -- guarded appends (a decision, a fork's copy) -----------------------------------------------


def guarded(store: Store) -> GuardedStore:
    assert isinstance(store, GuardedStore)
    return store


async def test_an_exclusive_append_needs_the_session_to_hold_only_its_batch(store: Store) -> None:
    """Stored entries of the batch are skipped as always, so a partial copy completes and a
    repeat is a no-op; an entry of the session the batch has not refuses it, nothing written."""
    await fresh(store)
    path = [msg("a"), msg("b", parent="a"), msg("c", parent="b")]
    assert await guarded(store).append_if_last("s1", path[:1], None) is True
    assert await guarded(store).append_if_last("s1", path, None) is True
    assert await guarded(store).append_if_last("s1", path, None) is True
    assert wires(await store.load_entries("s1")) == wires(path)
    other = [msg("a"), msg("x", parent="a")]
    assert await guarded(store).append_if_last("s1", other, None) is False
    assert await guarded(store).append_if_last("s1", path[:2], None) is False  # it holds "c" too
    assert wires(await store.load_entries("s1")) == wires(path)
    await fresh(store, "s2")
    assert await guarded(store).append_if_last("s2", [], None) is True
    with pytest.raises(EntryConflictError):
        await guarded(store).append_if_last("s1", [msg("a", "changed")], None)
    with pytest.raises(SessionNotFoundError):
        await guarded(store).append_if_last("nope", path, None)


async def test_exclusive_appends_of_two_paths_at_once_store_one(store: Store) -> None:
    """However they interleave (each round two paths sharing a root), one is stored whole and
    the other refused with nothing of it written."""
    for n in range(8):
        sid = await fresh(store, f"both-{n}")
        left = [msg("r"), msg("l1", parent="r"), msg("l2", parent="l1")]
        right = [msg("r"), msg("r1", parent="r")]
        done = await asyncio.gather(
            guarded(store).append_if_last(sid, left, None),
            guarded(store).append_if_last(sid, right, None),
        )
        assert sorted(done) == [False, True]
        assert wires(await store.load_entries(sid)) == wires(left if done[0] else right)


async def test_a_guarded_append_lands_only_after_the_entry_its_caller_read(store: Store) -> None:
    """Two deciders read the leaf ``a`` and each store their own child of it: the second finds
    ``a`` is no longer the newest entry and stores nothing (no sibling); a repeat of the first
    batch is still ``True`` (its entries are the newest), and a parent check still applies."""
    await fresh(store)
    await store.append_entries("s1", [msg("a")])
    one, two = msg("d1", parent="a"), msg("d2", parent="a")
    assert await guarded(store).append_if_last("s1", [one], "a") is True
    assert await guarded(store).append_if_last("s1", [two], "a") is False
    assert await guarded(store).append_if_last("s1", [one], "a") is True
    assert wires(await store.load_entries("s1")) == wires([msg("a"), one])
    assert await guarded(store).append_if_last("s1", [msg("d2", parent="d1")], "d1") is True
    assert await guarded(store).append_if_last("s1", [one], "a") is False  # d2 came after it
    with pytest.raises(ParentNotFoundError):
        await guarded(store).append_if_last("s1", [msg("e", parent="ghost")], "d2")
    with pytest.raises(EntryConflictError):
        await guarded(store).append_if_last("s1", [msg("d1", "changed", parent="a")], "d2")
    assert [e.id for e in await store.load_entries("s1")] == ["a", "d1", "d2"]


async def test_guarded_appends_after_one_entry_at_once_store_one(store: Store) -> None:
    """However they interleave, of two batches guarded by the same last entry one is stored
    whole and the other refused with nothing of it written."""
    for n in range(8):
        sid = await fresh(store, f"after-{n}")
        await store.append_entries(sid, [msg("r")])
        left = [msg("l1", parent="r"), msg("l2", parent="l1")]
        right = [msg("r1", parent="r")]
        done = await asyncio.gather(
            guarded(store).append_if_last(sid, left, "r"),
            guarded(store).append_if_last(sid, right, "r"),
        )
        assert sorted(done) == [False, True]
        assert wires(await store.load_entries(sid)) == wires(
            [msg("r"), *(left if done[0] else right)]
        )


# -- session IDs -----------------------------------------------------------------------------------

BAD_IDS: list[Any] = [
    "../x",
    ".",
    "..",
    "a/b",
    "x" * 201,
    "",
    {"$ne": None},
    42,
    None,
    "$where",
    "a\x00b",
    "a b",
    "caf\u00e9",
    "a\\b",
    "s1\n",
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_invalid_session_ids_are_refused_by_every_method(store: Store, bad: Any) -> None:
    await fresh(store)
    # A session exists, so a store that did I/O first would answer differently (NotFound, Exists).
    with pytest.raises(InvalidSessionIdError):
        await store.create_session(bad)
    with pytest.raises(InvalidSessionIdError):
        await store.load_entries(bad)
    with pytest.raises(InvalidSessionIdError):
        await rec(store).load_session(bad)
    with pytest.raises(InvalidSessionIdError):
        await store.append_entries(bad, [msg("e1")])
    with pytest.raises(InvalidSessionIdError):
        await store.append_entries(bad, [])
    assert issubclass(InvalidSessionIdError, ValueError)
    assert [e.id for e in await store.load_entries("s1")] == []


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_invalid_session_ids_are_refused_beyond_the_protocol(store: Store, bad: Any) -> None:
    """The guarded append, the seq read, delete, the append feed, the live-delta channel and
    what RememberingStore adds check the ID first too: the typed error, never a ``TypeError``,
    an answer, or a query or file naming it."""
    await fresh(store)
    remembering = RememberingStore(store)
    for s in (store, remembering):
        with pytest.raises(InvalidSessionIdError):
            await cast(GuardedStore, s).append_if_last(bad, [msg("e1")], None)
        with pytest.raises(InvalidSessionIdError):
            await cast(SeqStore, s).load_entries_after(bad, 0)
        with pytest.raises(InvalidSessionIdError):
            await cast(RetentionStore, s).delete_session(bad)
    for leaf in ("e1", ""):
        with pytest.raises(InvalidSessionIdError):
            await remembering.path(bad, leaf)
    if isinstance(store, AppendFeed):
        with pytest.raises(InvalidSessionIdError):
            store.watch_appends(bad, lambda: None)
    channel = cast(LiveStore, store).live_deltas()
    with pytest.raises(InvalidSessionIdError):
        await channel.publish(DeltaKey(bad, "run", 1), Delta(attempt=1, seq=1))
    with pytest.raises(InvalidSessionIdError):
        await channel.read(DeltaKey(bad, "run", 1))
    with pytest.raises(InvalidSessionIdError):
        await channel.clear(DeltaKey(bad, "run", 1))
    with pytest.raises(InvalidSessionIdError):
        await cast(Any, channel).drop_session(bad)
    assert [e.id for e in await store.load_entries("s1")] == []


@pytest.mark.parametrize("bad", [b for b in BAD_IDS if b not in (None, "")], ids=repr)
async def test_invalid_parent_id_is_refused(store: Store, bad: Any) -> None:
    # A fork source is a session ID too; None and "" both mean "no parent".
    with pytest.raises(InvalidSessionIdError):
        await store.create_session("child", parent_id=bad)
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("child")  # the refused create wrote nothing


@pytest.mark.parametrize("good", ["a", "x" * 200, "user:42@tenant.example", "A-b_c.d", "...", ".x"])
async def test_valid_session_ids_work(store: Store, good: str) -> None:
    await store.create_session(good)
    await store.append_entries(good, [msg("e1")])
    assert [e.id for e in await store.load_entries(good)] == ["e1"]
    assert (await rec(store).load_session(good)).id == good


# -- round trips -----------------------------------------------------------------------------------

UNICODE = 'h\u00e9llo \U0001f30d \u202eRTL\u202c \u2028sep\u2029 "q" \\ back \x00 nul \t tab \n nl'


def every_kind() -> list[Entry]:
    assistant = Message(
        role="assistant",
        content=[
            ThinkingContent(thinking="let me think \U0001f914", signature="c2lnbmF0dXJl+/=="),
            TextContent(text="answer", signature="text-sig"),
            ToolCall(
                id="call_1",
                name="search",
                arguments={"q": UNICODE, "n": [1, 2.5, None, True], "$x": {"a.b": 1}},
                signature="tc-sig",
            ),
            ToolCall(
                id="srv_1",
                name="web",
                server=True,
                server_type="web_search",
                output=ToolOutput(
                    content=[TextContent(text="found")], raw={"k": [1]}, is_error=True
                ),
            ),
        ],
        api="messages",
        provider="anthropic",
        model="claude-x",
        usage=Usage(
            input=10, output=5, cache_read=2, reasoning=1, cost=Cost(input=0.5, output=1.25)
        ),
        stop_reason="tool_use",
        timestamp=T0,
    )
    image = ImageContent(data="aGVsbG8=", mime_type="image/png")
    file = FileContent(
        url="https://example.com/a.pdf", mime_type="application/pdf", filename="a.pdf"
    )
    return [
        MessageEntry(id="u1", created_at=T0, message=user_message(UNICODE)),
        MessageEntry(id="a1", parent_id="u1", created_at=T0, message=assistant),
        MessageEntry(
            id="t1",
            parent_id="a1",
            created_at=T0 + timedelta(microseconds=1),
            message=tool_result_message("call_1", "search", TextContent(text="r")),
        ),
        MessageEntry(
            id="img", parent_id="t1", created_at=T0, message=user_image_message("see", image)
        ),
        MessageEntry(
            id="doc", parent_id="img", created_at=T0, message=user_file_message("read", file)
        ),
        MessageEntry(id="m1", parent_id="doc", created_at=T0, message=user_message("m"), meta=True),
        MessageEntry(
            id="y1", parent_id="m1", created_at=T0, message=user_message("y"), synthetic=True
        ),
        CompactionEntry(
            id="c1",
            parent_id="y1",
            created_at=T0,
            summary=UNICODE,
            first_kept_id="m1",
            tokens_before=99,
        ),
        Note(id="n1", parent_id="c1", created_at=T0, text=UNICODE, tags=["a", "\u00df"], lvl=3),
        CustomEntry.model_validate(
            {
                "id": "x1",
                "parent_id": "n1",
                "created_at": T0,
                "kind": "conformance-unregistered",
                "color": "blue",
                "nested": {"list": [1, {"deep": UNICODE}], "$op": None},
            }
        ),
    ]


async def test_every_entry_kind_round_trips_exactly(store: Store) -> None:
    await fresh(store)
    entries = every_kind()
    await store.append_entries("s1", entries)
    loaded = await store.load_entries("s1")
    assert loaded == entries
    assert wires(loaded) == wires(entries)
    assert isinstance(loaded[1], MessageEntry)
    thinking = loaded[1].message.content[0]
    assert isinstance(thinking, ThinkingContent)
    assert thinking.signature == "c2lnbmF0dXJl+/=="
    note, bare = loaded[-2], loaded[-1]
    assert isinstance(note, Note)
    assert note.level == 3
    assert type(bare) is CustomEntry
    assert bare.model_extra == {
        "color": "blue",
        "nested": {"list": [1, {"deep": UNICODE}], "$op": None},
    }
    # and the re-append of what was loaded is a no-op
    await store.append_entries("s1", loaded)
    assert len(await store.load_entries("s1")) == len(entries)


async def test_caller_mutation_after_append_does_not_reach_the_log(store: Store) -> None:
    await fresh(store)
    call = ToolCall(id="c1", name="search", arguments={"q": "original"})
    entry = MessageEntry(
        id="a1", created_at=T0, message=Message(role="assistant", content=[call], timestamp=T0)
    )
    expected = encode_entry(entry)
    await store.append_entries("s1", [entry])
    call.arguments["q"] = "mutated"  # frozen models still hold mutable dicts
    assert encode_entry(entry) != expected
    assert wires(await store.load_entries("s1")) == [expected]


async def test_ephemeral_flag_is_never_stored(store: Store) -> None:
    await fresh(store)
    entry = MessageEntry(id="e1", created_at=T0, message=user_message("x"), ephemeral=True)
    await store.append_entries("s1", [entry])
    (loaded,) = await store.load_entries("s1")
    assert isinstance(loaded, MessageEntry)
    assert loaded.ephemeral is False


# -- size limit ------------------------------------------------------------------------------------


async def test_oversized_entry_writes_nothing_of_its_batch(store: Store) -> None:
    await fresh(store)
    await store.append_entries("s1", [msg("before")])
    huge = msg("huge", "x" * (17 * 1024 * 1024))
    with pytest.raises(EntryTooLargeError) as info:
        await store.append_entries("s1", [msg("small"), huge, msg("after")])
    assert info.value.entry_id == "huge"
    assert info.value.size > info.value.limit
    assert [e.id for e in await store.load_entries("s1")] == ["before"]


async def test_custom_data_with_a_lone_surrogate_is_refused_typed_and_writes_nothing(
    store: Store,
) -> None:
    # what os.listdir returns for a non-UTF-8 file name; messages replace it with U+FFFD, but
    # application data is refused rather than rewritten (issue 16 item 6)
    await fresh(store)
    await store.append_entries("s1", [msg("before")])
    bad = Note(id="bad", created_at=T0, text="report\udcff.txt")
    with pytest.raises(EntryEncodeError) as info:
        await store.append_entries("s1", [msg("small"), bad])
    assert info.value.entry_id == "bad" and "U+DCFF" in str(info.value)
    assert [e.id for e in await store.load_entries("s1")] == ["before"]


def _nested(depth: int) -> list[object]:
    root: list[object] = []
    node = root
    for _ in range(depth):
        child: list[object] = []
        node.append(child)
        node = child
    return root


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"blob": b"\x89PNG\r\n"}, "bytes"),
        ({"tags": {"a", "b"}}, "set"),
        ({"tree": _nested(2000)}, "nested"),
        ({"score": float("nan")}, "NaN"),
        ({"bounds": [0.0, float("inf")]}, "infinity"),
        ({"low": {"v": float("-inf")}}, "infinity"),
    ],
    ids=["bytes", "set", "deep", "nan", "inf", "-inf"],
)
async def test_custom_data_json_cannot_hold_raises_encode_error_and_writes_nothing(
    store: Store, data: dict[str, object], reason: str
) -> None:
    """Application data that has no JSON form (bytes, a set, NaN or an infinity, nesting deeper
    than the encoder goes) is refused typed, naming the session and the entry, and nothing of
    the batch is stored."""
    await fresh(store)
    await store.append_entries("s1", [msg("before")])
    bad = CustomEntry(id="bad", created_at=T0, kind="app-data", **data)
    with pytest.raises(EntryEncodeError) as info:
        await store.append_entries("s1", [msg("small"), bad])
    assert (info.value.session_id, info.value.entry_id) == ("s1", "bad")
    assert reason in str(info.value)
    assert [e.id for e in await store.load_entries("s1")] == ["before"]


# -- concurrency and cancellation ------------------------------------------------------------------


async def test_concurrent_appends_lose_nothing(store: Store) -> None:
    await fresh(store)

    async def writer(w: int) -> None:
        for i in range(10):
            await store.append_entries("s1", [msg(f"w{w}-{i}")])

    await asyncio.gather(*(writer(w) for w in range(20)))
    ids = [e.id for e in await store.load_entries("s1")]
    assert len(ids) == 200
    assert len(set(ids)) == 200
    for w in range(20):
        mine = [i for i in ids if i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(10)]


async def test_concurrent_identical_retries_store_once(store: Store) -> None:
    await fresh(store)
    batch = [msg(f"e{i}") for i in range(5)]
    await asyncio.gather(*(store.append_entries("s1", batch) for _ in range(10)))
    assert wires(await store.load_entries("s1")) == wires(batch)


async def test_cancelled_before_io_has_no_effect(store: Store) -> None:
    await fresh(store)
    append = asyncio.create_task(store.append_entries("s1", [msg("e1")]))
    create = asyncio.create_task(store.create_session("s2"))
    append.cancel()
    create.cancel()
    with pytest.raises(asyncio.CancelledError):
        await append
    with pytest.raises(asyncio.CancelledError):
        await create
    assert await store.load_entries("s1") == []
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("s2")
    await store.create_session("s2")  # nothing half-made is in the way


async def test_loaded_entries_are_independent_copies(store: Store) -> None:
    """Issue 11.7: mutating what a load returned never changes the store or a later load."""
    await store.create_session("s1")
    await store.append_entries("s1", [msg("e1", "hello")])
    loaded = await store.load_entries("s1")
    first = loaded[0]
    assert isinstance(first, MessageEntry)
    first.message.content.clear()
    again = await store.load_entries("s1")
    assert again == [msg("e1", "hello")]
