"""FileStore.load_entries_after: the mark a store keeps per followed file, and everything that must
make it start over (docs/design.md#file-store). The contract itself is in the conformance suite.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from durable_agent.session import CorruptSessionError, Entry
from durable_agent.stores import FileStore
from tests.filestore.helpers import add_bytes, line, msg
from tests.support.polling import eventually


def numbered(pairs: list[tuple[int, Entry]]) -> list[tuple[int, str]]:
    return [(seq, e.id) for seq, e in pairs]


@pytest.fixture
def fs(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "sessions", fsync=False)


async def test_a_torn_tail_counts_once_it_is_complete(fs: FileStore) -> None:
    """A torn last line is no entry; a complete unterminated one is (as a load keeps it), and
    when the next append terminates it, it keeps its seq."""
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("e1")])
    path = fs.path("s1")
    assert numbered(await fs.load_entries_after("s1", 0)) == [(1, "e1")]
    add_bytes(path, line(msg("e2"))[:20])  # torn
    assert await fs.load_entries_after("s1", 1) == []
    os.truncate(path, path.stat().st_size - 20)
    add_bytes(path, line(msg("e2"))[:-1])  # complete, unterminated
    assert numbered(await fs.load_entries_after("s1", 1)) == [(2, "e2")]
    await fs.append_entries("s1", [msg("e3")])  # terminates e2 first
    assert numbered(await fs.load_entries_after("s1", 1)) == [(2, "e2"), (3, "e3")]
    assert numbered(await fs.load_entries_after("s1", 2)) == [(3, "e3")]
    assert [e.id for e in await fs.load_entries("s1")] == ["e1", "e2", "e3"]


async def test_another_store_objects_appends_are_read(fs: FileStore) -> None:
    """The mark describes the file, not this store's writes: appends through another store
    object (another process, say) are read from where the mark ends."""
    other = FileStore(fs.root, fsync=False)
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("a")])
    assert numbered(await fs.load_entries_after("s1", 0)) == [(1, "a")]
    await other.append_entries("s1", [msg("b"), msg("c")])
    assert numbered(await fs.load_entries_after("s1", 1)) == [(2, "b"), (3, "c")]
    assert numbered(await other.load_entries_after("s1", 2)) == [(3, "c")]


async def test_a_read_extending_the_mark_between_the_idle_checks_hides_nothing(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle follower learns "nothing new" from the mark and one ``stat``: the mark covers
    the seq asked for and the file ends where the mark does. Another follower's read, in a
    worker thread, may extend the mark between those two checks; the file then ends where the
    extended mark does, and the entries it added must still be read (two streams of one
    session in one process missed a reply that way)."""
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("a")])
    assert numbered(await fs.load_entries_after("s1", 0)) == [(1, "a")]
    await FileStore(fs.root, fsync=False).append_entries("s1", [msg("b")])
    session_file, real_stat = fs.path("s1"), os.stat
    raced: list[bool] = []

    def stat_as_another_follower_reads(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if not raced and Path(path) == session_file:
            raced.append(True)
            with ThreadPoolExecutor(1) as other:
                read = other.submit(asyncio.run, fs.load_entries_after("s1", 0)).result()
            assert numbered(read) == [(1, "a"), (2, "b")]
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_as_another_follower_reads)
    assert numbered(await fs.load_entries_after("s1", 1)) == [(2, "b")]
    assert raced


async def test_a_hand_copied_line_is_skipped_as_a_load_skips_it(fs: FileStore) -> None:
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("a"), msg("b")])
    assert len(await fs.load_entries_after("s1", 0)) == 2
    add_bytes(fs.path("s1"), line(msg("a")) + line(msg("c")))  # a repeated, then c
    assert numbered(await fs.load_entries_after("s1", 2)) == [(3, "c")]
    add_bytes(fs.path("s1"), line(msg("b", "edited")))
    with pytest.raises(CorruptSessionError, match="repeats line"):
        await fs.load_entries_after("s1", 3)


async def test_a_file_replaced_behind_the_store_is_read_afresh(fs: FileStore) -> None:
    """A session file removed and created again (here by hand, so no delete told the store)
    is read from its header, never from the old file's mark."""
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("old-1"), msg("old-2"), msg("old-3")])
    assert len(await fs.load_entries_after("s1", 0)) == 3
    header = json.loads(fs.path("s1").read_bytes().splitlines()[0])
    header["created_at"] = "1999-01-01T00:00:00.000Z"
    fs.path("s1").unlink()
    fs.path("s1").write_bytes(json.dumps(header).encode() + b"\n" + line(msg("new-1")))
    assert numbered(await fs.load_entries_after("s1", 0)) == [(1, "new-1")]
    add_bytes(fs.path("s1"), line(msg("new-2")) + line(msg("new-3")) + line(msg("new-4")))
    assert numbered(await fs.load_entries_after("s1", 3)) == [(4, "new-4")]


@pytest.mark.parametrize("oddity", ["none", "blank", "repeat", "escaped", "spaced"])
async def test_a_cold_read_counts_every_position_as_a_load_does(fs: FileStore, oddity: str) -> None:
    """A store object with no mark (a fresh server process resuming a client) counts the lines
    before the seq without decoding them, unless a line is not as the codec writes it: either
    way every position agrees with a load."""
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg(f"e{i}") for i in range(1, 8)])
    odd = {
        "none": b"",
        "blank": b"\n",
        "repeat": line(msg("e3")),
        "escaped": line(msg('quote"d-\u00e9')),
        "spaced": json.dumps(json.loads(line(msg("sp"))), indent=None).encode() + b"\n",
    }[oddity]
    add_bytes(fs.path("s1"), odd)
    await FileStore(fs.root, fsync=False).append_entries("s1", [msg("f1"), msg("f2")])
    stored = list(enumerate(await fs.load_entries("s1"), 1))
    for after in range(len(stored) + 1):
        cold = FileStore(fs.root, fsync=False)
        got = await cold.load_entries_after("s1", after)
        assert numbered(got) == numbered(stored[after:]), after
        await cold.append_entries("s1", [msg(f"late-{after}")])  # the mark then reads on
        assert numbered(await cold.load_entries_after("s1", len(stored))) == [
            (len(stored) + 1, f"late-{after}")
        ]
        stored = list(enumerate(await fs.load_entries("s1"), 1))


async def test_a_small_tail_is_read_on_the_loop_unless_an_append_holds_the_lock(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's read past its mark runs on the event loop when the lock is free (no thread
    hop: it is what following a run costs a client), and waits for an append holding the lock
    in a thread, never on the loop."""
    import asyncio
    import fcntl

    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("e1")])
    assert numbered(await fs.load_entries_after("s1", 0)) == [(1, "e1")]  # the mark
    await fs.append_entries("s1", [msg("e2")])
    threads: list[object] = []
    real = asyncio.to_thread

    async def counted(fn: Callable[..., object], /, *args: object) -> object:
        threads.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    assert numbered(await fs.load_entries_after("s1", 1)) == [(2, "e2")]
    assert threads == []
    await fs.append_entries("s1", [msg("e3")])
    fd = os.open(fs.path("s1"), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # an append in progress, as another process holds it
    try:
        read = asyncio.ensure_future(fs.load_entries_after("s1", 2))

        async def in_thread() -> bool:
            return len(threads) == 1

        await eventually(in_thread, within=10, what="the read to wait in a thread")
        assert not read.done()  # parked on the lock in its thread while the loop runs on
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert numbered(await read) == [(3, "e3")]


async def _long(fs: FileStore, n: int) -> list[tuple[int, str]]:
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg(f"e{i}") for i in range(1, n + 1)])
    return list(enumerate((e.id for e in await fs.load_entries("s1")), 1))


async def test_reads_before_far_after_and_near_a_cold_count_agree_with_a_load(
    fs: FileStore,
) -> None:
    """A cold read counts the lines before its seq and keeps no offset for them: a later read
    before them starts over, one far past the mark counts afresh, one near it reads on."""
    stored = await _long(fs, 60)
    cold = FileStore(fs.root, fsync=False)
    for grown, reads in [(60, [50, 5, 30]), (400, [390, 31, 350, 120]), (420, [410, 0, 419])]:
        await fs.append_entries("s1", [msg(f"e{i}") for i in range(len(stored) + 1, grown + 1)])
        stored = list(enumerate((e.id for e in await fs.load_entries("s1")), 1))
        for after in reads:
            got = await cold.load_entries_after("s1", after)
            assert numbered(got) == stored[after:], after


async def test_a_line_repeating_a_counted_one_is_skipped_or_reported_as_a_load_does(
    fs: FileStore,
) -> None:
    stored = await _long(fs, 300)
    cold = FileStore(fs.root, fsync=False)
    assert numbered(await cold.load_entries_after("s1", 290)) == stored[290:]
    add_bytes(fs.path("s1"), line(msg("e7")) + line(msg("late")))  # e7 copied, then late
    assert numbered(await cold.load_entries_after("s1", 300)) == [(301, "late")]
    assert [e.id for e in await fs.load_entries("s1")][-1] == "late"
    add_bytes(fs.path("s1"), line(msg("e9", "edited")))
    with pytest.raises(CorruptSessionError, match="repeats line 10 ") as raised:
        await cold.load_entries_after("s1", 301)
    with pytest.raises(CorruptSessionError) as loaded:
        await fs.load_entries("s1")
    assert str(raised.value) == str(loaded.value)


async def test_a_counted_id_that_is_not_utf8_is_damage_as_a_load_says(fs: FileStore) -> None:
    await _long(fs, 50)
    body = fs.path("s1").read_bytes().replace(b'"id":"e7"', b'"id":"e\xff7"')
    fs.path("s1").write_bytes(body)
    with pytest.raises(CorruptSessionError, match="line 8"):
        await fs.load_entries("s1")
    with pytest.raises(CorruptSessionError, match="line 8"):
        await FileStore(fs.root, fsync=False).load_entries_after("s1", 40)
