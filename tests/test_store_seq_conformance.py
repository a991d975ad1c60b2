"""Reading a session after a sequence number (docs/design.md#store-contract): every store's
``load_entries_after`` and ``last_entry``, run against each kind in STORE_KINDS."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_agent.session import (
    Entry,
    InvalidSessionIdError,
    LastEntryStore,
    RetentionStore,
    SeqStore,
    SessionNotFoundError,
    Store,
)
from durable_agent.session.store import last_entries
from durable_agent.stores import FileStore
from tests.filestore.helpers import add_bytes, line
from tests.support.conformance import fresh, msg, wires
from tests.test_store_retention import twin

# -- reading after a sequence number (docs/design.md#store-contract) ------------------------------


def seq_store(store: Store) -> SeqStore:
    assert isinstance(store, SeqStore), f"{type(store).__name__} has no load_entries_after"
    return store


def numbered(pairs: Sequence[tuple[int, Entry]]) -> list[tuple[int, str]]:
    return [(seq, e.id) for seq, e in pairs]


async def test_after_every_position_is_what_follows_in_append_order(store: Store) -> None:
    """Seqs are 1-based positions in the order ``load_entries`` returns; after N is exactly
    what follows N, decoded as a load decodes it; past the end, nothing."""
    s = seq_store(store)
    await fresh(store)
    batches = [["a", "b", "c"], ["d"], ["e", "f"], ["b", "g"]]  # the repeated b is skipped
    for batch in batches:
        await store.append_entries("s1", [msg(i) for i in batch])
    every = ["a", "b", "c", "d", "e", "f", "g"]
    loaded = await store.load_entries("s1")
    assert wires([e for _, e in await s.load_entries_after("s1", 0)]) == wires(loaded)
    for after in range(len(every) + 3):
        expected = list(enumerate(every, 1))[after:]
        assert numbered(await s.load_entries_after("s1", after)) == expected, after


async def test_a_follower_reads_each_entry_once_as_the_log_grows(store: Store) -> None:
    """Reading after the last seq seen, appends in between: every entry once, in order, with
    nothing new reading as ``[]`` (what a run stream's follower does)."""
    s = seq_store(store)
    await fresh(store)
    seen: list[tuple[int, str]] = []
    after = 0
    for k in range(6):
        assert await s.load_entries_after("s1", after) == []
        await store.append_entries("s1", [msg(f"e{k}-{i}") for i in range(k % 3 + 1)])
        got = numbered(await s.load_entries_after("s1", after))
        assert got and got[0][0] == after + 1
        seen += got
        after = got[-1][0]
    ids = [e.id for e in await store.load_entries("s1")]
    assert seen == list(enumerate(ids, 1))
    # a second follower from the start, and one from the middle, see the same seqs
    assert numbered(await s.load_entries_after("s1", 0)) == seen
    assert numbered(await s.load_entries_after("s1", 4)) == seen[4:]


async def test_after_unknown_session_and_bad_cursor(store: Store) -> None:
    s = seq_store(store)
    with pytest.raises(SessionNotFoundError):
        await s.load_entries_after("nope", 0)
    await fresh(store, "empty")
    assert await s.load_entries_after("empty", 0) == []
    assert await s.load_entries_after("empty", 5) == []
    for bad in (-1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="after"):
            await s.load_entries_after("empty", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        await s.load_entries_after("../x", 0)


async def test_after_a_delete_the_seqs_start_over(store: Store) -> None:
    """Deleted means deleted: a session created again under the same ID reads from seq 1, with
    none of the old entries, whatever a follower read before."""
    s = seq_store(store)
    assert isinstance(store, RetentionStore)
    await fresh(store)
    await store.append_entries("s1", [msg("old-1"), msg("old-2"), msg("old-3")])
    assert len(await s.load_entries_after("s1", 0)) == 3
    await store.delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await s.load_entries_after("s1", 0)
    await fresh(store)
    await store.append_entries("s1", [msg("new-1")])
    assert numbered(await s.load_entries_after("s1", 0)) == [(1, "new-1")]
    assert await s.load_entries_after("s1", 1) == []
    await store.append_entries("s1", [msg("new-2"), msg("new-3"), msg("new-4")])
    assert numbered(await s.load_entries_after("s1", 3)) == [(4, "new-4")]


async def test_reads_after_race_appends_without_a_hole(store: Store) -> None:
    """Followers reading while writers append: each sees every entry once, in seq order."""
    s = seq_store(store)
    await fresh(store)

    async def writer(w: int) -> None:
        for i in range(8):
            await store.append_entries("s1", [msg(f"w{w}-{i}")])

    async def follower() -> list[tuple[int, str]]:
        seen: list[tuple[int, str]] = []
        while len(seen) < 32:
            got = numbered(await s.load_entries_after("s1", seen[-1][0] if seen else 0))
            seen += got
            await asyncio.sleep(0)
        return seen

    readers = [asyncio.create_task(follower()) for _ in range(3)]
    await asyncio.gather(*(writer(w) for w in range(4)))
    results = await asyncio.wait_for(asyncio.gather(*readers), 30)
    ids = [e.id for e in await store.load_entries("s1")]
    for seen in results:
        assert seen == list(enumerate(ids, 1))


async def test_a_limit_reads_at_most_that_many_in_seq_order(store: Store) -> None:
    """``limit`` cuts the read after that many entries (a page, docs/design.md#store-contract):
    from the start, from the middle of a batch, past the end; a batch split by the cut gives
    its first entries only, and the next read after the last seq goes on from there."""
    s = seq_store(store)
    await fresh(store)
    for batch in [["a", "b", "c"], ["d"], ["e", "f", "g", "h"]]:
        await store.append_entries("s1", [msg(i) for i in batch])
    every = list(enumerate("abcdefgh", 1))
    for after in range(len(every) + 2):
        for limit in (1, 2, 3, 5, len(every) + 4):
            got = numbered(await s.load_entries_after("s1", after, limit))
            assert got == every[after : after + limit], (after, limit)
    assert numbered(await s.load_entries_after("s1", 4, limit=2)) == [(5, "e"), (6, "f")]
    assert numbered(await s.load_entries_after("s1", 6, limit=None)) == [(7, "g"), (8, "h")]
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="limit"):
            await s.load_entries_after("s1", 0, bad)  # type: ignore[arg-type]


async def test_a_limited_read_follows_appends_page_by_page(store: Store) -> None:
    """Paging with a limit while the log grows: every entry once, in seq order, and a page is
    full while anything follows it (what the HTTP pages' ``more`` rests on)."""
    s = seq_store(store)
    await fresh(store)
    seen: list[tuple[int, str]] = []
    for k in range(5):
        await store.append_entries("s1", [msg(f"e{k}-{i}") for i in range(k + 1)])
        pages: list[list[tuple[int, str]]] = []
        while page := numbered(await s.load_entries_after("s1", seen[-1][0] if seen else 0, 2)):
            pages.append(page)
            seen += page
        assert all(len(page) == 2 for page in pages[:-1]), pages
    ids = [e.id for e in await store.load_entries("s1")]
    assert seen == list(enumerate(ids, 1))


# -- the last entry alone (docs/design.md#store-contract) -----------------------------------------


async def last_of(store: Store, session_id: str = "s1") -> tuple[int, str] | None:
    """``last_entry``'s answer as (seq, ID), checked against what a load and a seq read end
    with: the entry, decoded as a load decodes it, and the seq a seq read gives it."""
    assert isinstance(store, LastEntryStore), f"{type(store).__name__} has no last_entry"
    last = await store.last_entry(session_id)
    loaded = await store.load_entries(session_id)
    assert isinstance(store, SeqStore)
    read = await store.load_entries_after(session_id, 0)
    if last is None:
        assert loaded == [] and read == []
        return None
    assert (last[0], wires([last[1]])) == (len(loaded), wires(loaded[-1:]))
    assert numbered([last]) == numbered(read[-1:])
    return last[0], last[1].id


async def test_the_last_entry_is_the_one_a_seq_read_ends_with(store: Store) -> None:
    """Empty, one entry, many in batches (a repeated one skipped), and after appends through
    another store object (another process): the last entry and its seq, as reads end with."""
    await fresh(store)
    assert await last_of(store) is None
    await store.append_entries("s1", [msg("a")])
    assert await last_of(store) == (1, "a")
    for batch in [["b", "c"], ["d"], ["e", "f", "g"], ["c", "h"]]:
        await store.append_entries("s1", [msg(i) for i in batch])
    assert await last_of(store) == (8, "h")
    other = twin(store)
    await other.append_entries("s1", [msg("i"), msg("j")])
    assert await last_of(store) == (10, "j")
    assert await last_of(other) == (10, "j")
    await other.append_entries("s1", [msg("k")])
    assert await last_of(twin(store)) == (11, "k")  # a store object that read nothing yet
    assert await last_of(store) == (11, "k")


async def test_the_last_entries_are_those_a_seq_read_ends_with(store: Store) -> None:
    """``last_entries`` (the store's own read where it has one, MongoStore's; else its last
    entry, then a seq read): the last ``count`` entries and their seqs, fewer when the session
    holds fewer; a missing session raises as a load does."""
    await fresh(store)
    assert await last_entries(store, "s1", 3) == []
    for batch in [["a", "b", "c"], ["d"], ["e", "f", "g"], ["c", "h"]]:
        await store.append_entries("s1", [msg(i) for i in batch])
    read = numbered(await seq_store(store).load_entries_after("s1", 0))
    for count in (1, 2, 3, 4, 7, 8, 50):
        assert numbered(await last_entries(store, "s1", count)) == read[-count:], count
    await twin(store).append_entries("s1", [msg("i")])  # another process's append
    assert numbered(await last_entries(store, "s1", 2)) == [(8, "h"), (9, "i")]
    with pytest.raises(SessionNotFoundError):
        await last_entries(store, "nope", 2)


async def test_the_last_entry_of_no_session(store: Store) -> None:
    """An unknown session, a deleted one (through another store object too), one created
    again (empty, then from seq 1), a bad ID (before any I/O)."""
    assert isinstance(store, LastEntryStore) and isinstance(store, RetentionStore)
    with pytest.raises(SessionNotFoundError):
        await store.last_entry("nope")
    with pytest.raises(InvalidSessionIdError):
        await store.last_entry("../x")
    await fresh(store)
    await store.append_entries("s1", [msg("old-1"), msg("old-2")])
    assert await last_of(store) == (2, "old-2")
    await twin(store).delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await store.last_entry("s1")
    await fresh(store)
    assert await last_of(store) is None
    await store.append_entries("s1", [msg("new-1")])
    assert await last_of(store) == (1, "new-1")


@pytest.mark.parametrize("reader", ["cold", "counted", "followed"])
async def test_a_file_sessions_last_entry_with_a_torn_or_hand_edited_tail(
    tmp_path: Path, reader: str
) -> None:
    """A FileStore's last entry as a load decides it: a torn last line is no entry, a complete
    unterminated one is; a blank line or a hand-copied repeat after the last entry moves
    nothing. Read by a store object that read nothing of the file (``cold``), by one whose
    mark counted every entry without keeping their lines (``counted``), and by the one that
    read it all along (``followed``)."""
    fs = FileStore(tmp_path / "sessions", fsync=False)
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg(f"e{i}") for i in range(1, 4)])
    path = fs.path("s1")

    async def last() -> tuple[int, str] | None:
        if reader == "followed":
            await fs.load_entries_after("s1", 0)
            return await last_of(fs)
        other = FileStore(fs.root, fsync=False)
        if reader == "counted":  # a resume at the end: its lines counted, none kept
            await other.load_entries_after("s1", len(await other.load_entries("s1")))
        return await last_of(other)

    assert await last() == (3, "e3")
    add_bytes(path, line(msg("e4"))[:20])  # torn
    assert await last() == (3, "e3")
    os.truncate(path, path.stat().st_size - 20)
    add_bytes(path, line(msg("e4"))[:-1])  # complete, unterminated
    assert await last() == (4, "e4")
    await fs.append_entries("s1", [msg("e5")])  # terminates e4 first
    assert await last() == (5, "e5")
    add_bytes(path, b"\n")  # a blank line
    assert await last() == (5, "e5")
    add_bytes(path, line(msg("e2")))  # a hand-copied repeat
    assert await last() == (5, "e5")
    add_bytes(path, line(msg("e2"))[:-1])  # and one unterminated
    assert await last() == (5, "e5")
