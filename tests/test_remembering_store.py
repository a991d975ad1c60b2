"""RememberingStore (docs/design.md#worker-memory): a store wrapper that remembers what it stored
or loaded, so a path rarely costs a session load, bounded in bytes, and exact: a remembered path
equals the path a load builds.

The wrapper also runs the whole store conformance and retention suites (over MemoryStore and
FileStore): remembering never changes what the store does.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent
from durable_agent.ai.timefmt import utc_now
from durable_agent.durable.live import live_channel
from durable_agent.session import (
    Entry,
    EntryConflictError,
    MessageEntry,
    SessionNotFoundError,
    Store,
    encode_entry,
    path,
)
from durable_agent.session.deltas import LiveStore
from durable_agent.session.store import AppendFeed, GuardedStore, LastEntryStore, RetentionStore
from durable_agent.stores import FileStore, MemoryStore, RememberingStore
from durable_agent.stores.remembering import MAX_SESSIONS
from tests import test_store_conformance, test_store_retention
from tests.support.handles import WrappedStore


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The conformance suites' store: a real store behind the wrapper."""
    inner: Store = MemoryStore() if request.param == "memory" else FileStore(tmp_path / "s")
    return RememberingStore(inner)


def _store_only(fn: Callable[..., Any]) -> bool:
    """A suite test that needs nothing but ``store`` (and its own parameters)."""
    given: set[str] = set()
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            names = mark.args[0]
            given.update(n.strip() for n in (names.split(",") if isinstance(names, str) else names))
    return set(inspect.signature(fn).parameters) - given == {"store"}


for _suite in (test_store_conformance, test_store_retention):
    for _name, _fn in vars(_suite).items():
        if _name.startswith("test_") and callable(_fn) and _store_only(_fn):
            globals()[_name] = _fn


class CountingStore(MemoryStore):
    """A real MemoryStore that counts whole-session loads."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: Counter[str] = Counter()

    async def load_entries(self, session_id: str) -> list[Entry]:
        self.loads[session_id] += 1
        return await super().load_entries(session_id)


T0 = utc_now().replace(microsecond=123456)
"""One time for every entry: an encoded entry's size depends on its time (trailing fractional
zeros are dropped), and the memory-bound tests compare sizes."""


def entry(eid: str, parent: str | None, text: str = "hi", **extra: Any) -> MessageEntry:
    return MessageEntry(
        id=eid,
        parent_id=parent,
        created_at=T0,
        message=Message(role="user", content=[TextContent(text=text)]),
        **extra,
    )


def size(*entries: Entry) -> int:
    return sum(len(encode_entry(e).encode("utf-8")) for e in entries)


async def session(store: Store, sid: str, *entries: Entry) -> None:
    await store.create_session(sid)
    if entries:
        await store.append_entries(sid, list(entries))


async def test_appended_entries_build_a_path_without_a_load() -> None:
    inner = CountingStore()
    store = RememberingStore(inner)
    a, b, c = entry("a", None), entry("b", "a"), entry("c", "b")
    await session(store, "s", a)
    await store.append_entries("s", [b, c])
    assert await store.path("s", "c") == [a, b, c]
    assert await store.path("s", "b") == [a, b]
    assert await store.path("s", "") == []
    assert inner.loads["s"] == 0


async def test_a_guarded_append_is_remembered_once_stored_and_a_refused_one_is_not() -> None:
    """A busy-checked run's input is stored with ``append_if_last``: its model call builds the
    path from memory, as after ``append_entries`` (it loaded the whole session); a refused one
    leaves nothing remembered."""
    inner = CountingStore()
    store = RememberingStore(inner)
    a, b, c = entry("a", None), entry("b", "a"), entry("c", "a")
    await session(store, "s", a)
    assert await store.append_if_last("s", [b], "a") is True
    assert await store.path("s", "b") == [a, b]
    assert inner.loads["s"] == 0
    assert await store.append_if_last("s", [c], "a") is False
    assert await store.path("s", "c") == []  # not stored: the path a load builds
    assert inner.loads["s"] == 1


async def test_a_path_is_remembered_only_when_its_whole_ancestry_is() -> None:
    inner = CountingStore()
    store = RememberingStore(inner)
    a, b, c = entry("a", None), entry("b", "a"), entry("c", "b")
    await session(store, "s", a)
    await inner.append_entries("s", [b])  # another writer: not seen by the wrapper
    await store.append_entries("s", [c])
    assert await store.path("s", "c") == [a, b, c]
    assert inner.loads["s"] == 1
    # the load was remembered: the next path needs none
    assert await store.path("s", "c") == [a, b, c]
    assert inner.loads["s"] == 1
    # a leaf the session does not hold is loaded and found missing
    assert await store.path("s", "nope") == []
    assert inner.loads["s"] == 2


async def test_an_entry_is_remembered_as_its_stored_encoding_decodes() -> None:
    store = RememberingStore(MemoryStore())
    await session(store, "s")
    await store.append_entries("s", [entry("a", None, ephemeral=True)])
    remembered = await store.path("s", "a")
    assert isinstance(remembered[0], MessageEntry)
    assert remembered[0].ephemeral is False  # the flag is never stored
    assert remembered == path(await store.store.load_entries("s"), "a")


async def test_a_rejected_append_is_not_remembered_and_the_first_writer_wins() -> None:
    inner = CountingStore()
    store = RememberingStore(inner)
    a = entry("a", None, "first")
    await session(store, "s", a)
    with pytest.raises(EntryConflictError):
        await store.append_entries("s", [entry("b", "a"), entry("a", None, "second")])
    assert await store.path("s", "a") == [a]
    assert inner.loads["s"] == 0
    with pytest.raises(SessionNotFoundError):
        await store.append_entries("missing", [entry("x", None)])
    assert store.remembered_bytes() == size(a)


async def test_a_deleted_session_is_forgotten() -> None:
    inner = CountingStore()
    store = RememberingStore(inner)
    await session(store, "s", entry("a", None), entry("b", "a"))
    await store.delete_session("s")
    assert store.remembered_bytes() == 0
    with pytest.raises(SessionNotFoundError):
        await store.path("s", "b")
    # created again under the same ID: nothing of the deleted one reaches it
    fresh = entry("z", None)
    await session(store, "s", fresh)
    assert await store.path("s", "b") == []
    assert await store.path("s", "z") == [fresh]


async def test_a_session_created_again_elsewhere_replaces_what_a_load_finds() -> None:
    """Another process deleted and re-created the session: the next load is what counts."""
    inner = CountingStore()
    store = RememberingStore(inner)
    await session(store, "s", entry("a", None, "old"))
    await inner.delete_session("s")
    new = entry("a", None, "new")  # even under the same entry ID
    await session(inner, "s", new)
    await store.load_entries("s")
    assert await store.path("s", "a") == [new]


async def test_a_confirmed_path_is_the_session_the_store_holds_now() -> None:
    """Deleted and created again around the wrapper: a confirmed path (a run's start) reads the
    record, finds another session and loads it; an unchanged session costs no load."""
    inner = CountingStore()
    store = RememberingStore(inner)
    await session(store, "s", entry("a", None, "old"), entry("b", "a"))
    assert [e.id for e in await store.path("s", "b", confirm=True)] == ["a", "b"]
    assert inner.loads["s"] == 0
    await inner.delete_session("s")
    with pytest.raises(SessionNotFoundError):
        await store.path("s", "b", confirm=True)
    await inner.create_session("s")
    assert await store.path("s", "b", confirm=True) == []
    assert inner.loads["s"] == 1
    # the load labelled what it found: the next confirmed path needs no load
    await store.append_entries("s", [entry("z", None)])
    assert [e.id for e in await store.path("s", "z", confirm=True)] == ["z"]
    assert inner.loads["s"] == 1


async def test_a_load_that_overlaps_a_delete_is_not_remembered() -> None:
    gate = asyncio.Event()
    reading = asyncio.Event()

    class SlowLoads(MemoryStore):
        async def load_entries(self, session_id: str) -> list[Entry]:
            entries = await super().load_entries(session_id)
            reading.set()
            await gate.wait()
            return entries

    store = RememberingStore(SlowLoads())
    await store.create_session("s")
    await store.store.append_entries("s", [entry("a", None)])
    load = asyncio.create_task(store.load_entries("s"))
    await reading.wait()
    await store.delete_session("s")
    gate.set()
    assert [e.id for e in await load] == ["a"]
    assert store.remembered_bytes() == 0


async def test_an_append_that_overlaps_a_create_is_not_remembered() -> None:
    """An append to the old session returns after another process deleted it and the wrapper
    created it again: what it wrote belongs to the deleted session and is not remembered as the
    new one's (a confirmed path of it is loaded: empty)."""
    gate = asyncio.Event()
    writing = asyncio.Event()

    class SlowAppends(MemoryStore):
        async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
            await super().append_entries(session_id, entries)
            writing.set()
            await gate.wait()

    inner = SlowAppends()
    store = RememberingStore(inner)
    await store.create_session("s")
    append = asyncio.create_task(store.append_entries("s", [entry("a", None), entry("b", "a")]))
    await writing.wait()
    await inner.delete_session("s")  # elsewhere
    await store.create_session("s")
    gate.set()
    await append
    assert await store.path("s", "b", confirm=True) == []
    assert store.remembered_bytes() == 0
    # an append to another session that overlaps a create is remembered all the same
    gate.clear()
    writing.clear()
    await store.create_session("t")
    append = asyncio.create_task(store.append_entries("t", [entry("c", None)]))
    await writing.wait()
    await store.create_session("u")
    gate.set()
    await append
    assert store.remembered_bytes() > 0


async def test_memory_is_bounded_in_bytes_least_recently_used_first() -> None:
    inner = CountingStore()
    a, b, c, d = entry("a", None), entry("b", "a"), entry("c", None), entry("d", None)
    store = RememberingStore(inner, max_bytes=size(a, b, c))
    await session(store, "s1", a, b)
    await session(store, "s2", c)
    assert store.remembered_bytes() == size(a, b, c)
    assert await store.path("s1", "b") == [a, b]  # s1 is now the most recently used
    await session(store, "s3", d)
    assert store.remembered_bytes() <= size(a, b, c)
    assert await store.path("s1", "b") == [a, b] and await store.path("s3", "d") == [d]
    assert inner.loads == Counter()
    assert await store.path("s2", "c") == [c]  # dropped: loaded again
    assert inner.loads == Counter({"s2": 1})


async def test_a_session_larger_than_the_bound_is_always_loaded() -> None:
    inner = CountingStore()
    chain = [entry("e0", None), *(entry(f"e{i}", f"e{i - 1}") for i in range(1, 4))]
    store = RememberingStore(inner, max_bytes=size(*chain) - 1)
    small = entry("x", None)
    await session(store, "small", small)
    await session(store, "big", *chain)
    for n in (1, 2):
        assert await store.path("big", "e3") == chain
        assert inner.loads["big"] == n
    # the big session did not push the small one out
    assert await store.path("small", "x") == [small]
    assert inner.loads["small"] == 0


async def test_zero_bytes_remembers_nothing() -> None:
    inner = CountingStore()
    store = RememberingStore(inner, max_bytes=0)
    a = entry("a", None)
    await session(store, "s", a)
    for n in (1, 2):
        assert await store.path("s", "a") == [a]
        assert inner.loads["s"] == n
    assert store.remembered_bytes() == 0


async def test_at_most_max_sessions_are_remembered() -> None:
    inner = CountingStore()
    store = RememberingStore(inner)
    for i in range(MAX_SESSIONS + 1):
        await session(store, f"s{i}", entry("a", None))
    assert await store.path(f"s{MAX_SESSIONS}", "a") != []
    assert await store.path("s1", "a") != []
    assert sum(inner.loads.values()) == 0
    assert await store.path("s0", "a") != []  # the least recently used went first
    assert inner.loads == Counter({"s0": 1})


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_every_remembered_path_equals_the_path_of_a_load(seed: int) -> None:
    """A random tree grown by appends (and one parent cycle): for every entry, the path from
    memory equals ``session.path`` over a load, and so does a fresh wrapper's (loaded) path."""
    rng = random.Random(seed)
    inner = CountingStore()
    store = RememberingStore(inner)
    await store.create_session("s")
    ids: list[str] = []
    t0 = utc_now()
    for i in range(60):
        parent = rng.choice([None, *ids[-8:]]) if ids else None
        e = entry(f"e{i}", parent, f"text {i}")
        e = e.model_copy(update={"created_at": t0 + timedelta(seconds=i)})
        await store.append_entries("s", [e])
        ids.append(e.id)
    await store.append_entries("s", [entry("x", "y"), entry("y", "x")])
    loaded = await inner.load_entries("s")
    cold = RememberingStore(inner)
    for leaf in [*ids, "x", "y"]:
        expected = path(loaded, leaf)
        assert await store.path("s", leaf) == expected
        assert await cold.path("s", leaf) == expected


async def test_other_store_methods_pass_through(tmp_path: Path) -> None:
    files = FileStore(tmp_path / "s")
    store = RememberingStore(files)
    record = await store.create_session("s")
    assert await store.load_session("s") == record
    assert await store.list_sessions() == [record]
    assert store.root == files.root
    assert isinstance(store, LiveStore)
    assert store.live_deltas() is files.live_deltas()
    assert live_channel("auto", store) is files.live_deltas()
    with pytest.raises(AttributeError):
        _ = store.no_such_method


def test_the_wrapper_is_of_the_protocols_its_store_is_of(tmp_path: Path) -> None:
    """What the worker's code asks of its store (``isinstance`` against the runtime-checkable
    protocols) has the wrapped store's answer, on every Python: 3.12 made those checks look
    attributes up statically, past ``__getattr__``."""
    for inner in (MemoryStore(), FileStore(tmp_path / "s")):
        wrapped = RememberingStore(inner)
        for protocol in (RetentionStore, LiveStore, AppendFeed, GuardedStore, LastEntryStore):
            assert isinstance(wrapped, protocol) == isinstance(inner, protocol), protocol
    plain = RememberingStore(WrappedStore(MemoryStore()))  # the three verbs and load_session
    assert not isinstance(plain, RetentionStore)
    assert not isinstance(plain, LiveStore)
    assert not isinstance(plain, AppendFeed)


def test_a_bad_bound_is_refused() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="max_bytes"):
            RememberingStore(MemoryStore(), max_bytes=bad)  # type: ignore[arg-type]
