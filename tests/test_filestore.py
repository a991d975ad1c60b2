"""FileStore layout, the line-outcome tables, torn-tail repair, locking and OS errors
(docs/design.md#file-store).

Files are damaged by writing bytes directly, exactly as a crash or a disk fault would leave them.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent
from durable_agent.ai.timefmt import format_time
from durable_agent.session import (
    CorruptSessionError,
    Entry,
    EntryConflictError,
    InvalidSessionIdError,
    MessageEntry,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    encode_entry,
)
from durable_agent.stores import FileStore
from durable_agent.stores.file.lines import is_json_prefix

T0 = datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)


def msg(entry_id: str, text: str | None = None) -> Entry:
    return MessageEntry(
        id=entry_id,
        created_at=T0,
        message=Message(
            role="user", content=[TextContent(text=text or f"text of {entry_id}")], timestamp=T0
        ),
    )


def line(entry: Entry) -> bytes:
    return encode_entry(entry).encode() + b"\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def fs(root: Path) -> FileStore:
    return FileStore(root)


async def one_entry(fs: FileStore, session_id: str = "s1") -> Path:
    """A session holding e1; returns its file."""
    await fs.create_session(session_id)
    await fs.append_entries(session_id, [msg("e1")])
    return fs.root / f"{session_id}.jsonl"


def add_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def listing(path: Path) -> list[str]:
    """Every path under ``path``, relative (sync, so async tests need no blocking Path calls)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def fresh_root(root: Path) -> Path:
    root.mkdir()
    return root


def ids(entries: list[Entry]) -> list[str]:
    return [e.id for e in entries]


# -- layout ----------------------------------------------------------------------------------------


async def test_header_line_is_exact(fs: FileStore) -> None:
    record = await fs.create_session("s1")
    child = await fs.create_session("c1", parent_id="s1")
    header = (fs.root / "s1.jsonl").read_bytes()
    expected = {"type": "session_init", "id": "s1", "created_at": format_time(record.created_at)}
    assert header == json.dumps(expected, separators=(",", ":")).encode() + b"\n"
    child_header = json.loads((fs.root / "c1.jsonl").read_bytes())
    assert list(child_header) == ["type", "id", "parent_id", "created_at"]
    assert child_header["parent_id"] == "s1"
    assert child_header["created_at"] == format_time(child.created_at)
    assert child_header["created_at"].endswith("Z")


async def test_one_line_per_entry_and_the_file_only_grows(fs: FileStore) -> None:
    path = await one_entry(fs)
    before = path.read_bytes()
    batch = [msg("e2", "caf\u00e9 \U0001f30d"), msg("e3", "multi\nline")]
    await fs.append_entries("s1", batch)
    after = path.read_bytes()
    assert after.startswith(before)
    assert after[len(before) :] == line(batch[0]) + line(batch[1])
    assert after.count(b"\n") == 4  # header + 3 entries; "\n" inside text is escaped
    assert "caf\u00e9".encode() in after  # non-ASCII unescaped


async def test_modes_under_a_restrictive_umask(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "er" / "sessions"
    old = os.umask(0o077)
    try:
        fs = FileStore(root)
        await fs.create_session("s1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "s1.jsonl").stat().st_mode) == 0o644


async def test_fsync_setting_is_honoured(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    synced = FileStore(root)
    await synced.create_session("a")
    assert len(calls) == 2  # the file, then the directory
    await synced.append_entries("a", [msg("e1")])
    assert len(calls) == 3
    calls.clear()
    fast = FileStore(root, fsync=False)
    await fast.create_session("b")
    await fast.append_entries("b", [msg("e1"), msg("e2")])
    assert calls == []
    assert ids(await fast.load_entries("b")) == ["e1", "e2"]


async def test_load_does_not_create_the_root(root: Path, fs: FileStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await fs.load_entries("s1")
    with pytest.raises(SessionNotFoundError):
        await fs.append_entries("s1", [msg("e1")])
    assert "sessions" not in listing(root.parent)


async def test_invalid_ids_never_reach_the_file_system(tmp_path: Path, fs: FileStore) -> None:
    outside = FileStore(tmp_path)
    await outside.create_session("x")  # tmp_path/x.jsonl, which "../x" would name from root
    before = listing(tmp_path)
    with pytest.raises(InvalidSessionIdError):
        await fs.load_entries("../x")
    with pytest.raises(InvalidSessionIdError):
        await fs.append_entries("../x", [msg("e1")])
    with pytest.raises(InvalidSessionIdError):
        await fs.create_session("../y")
    assert listing(tmp_path) == before
    assert await outside.load_entries("x") == []


# -- the line-outcome table ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "blank", [b"\n", b"   \n", b"\t \r\n", "\u00a0\u2003\u3000\n".encode(), b"\x0b\x0c\n"]
)
async def test_blank_lines_are_skipped(fs: FileStore, blank: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, blank + blank + line(msg("e2")) + blank)
    assert ids(await fs.load_entries("s1")) == ["e1", "e2"]


@pytest.mark.parametrize(
    ("damage", "lineno"),
    [
        (b"\x00\n", 3),  # NUL is not blank
        (b"\x00" * 10 + b"\n", 3),
        (b'{"type":"message","id":\n', 3),  # a torn write later terminated: damaged
        (b"not json\n", 3),
        (b'{"type":"bogus","id":"x","created_at":"2026-01-01T00:00:00Z"}\n', 3),
        (b'{"type":"message","id":"x","created_at":"yesterday","message":{"role":"user"}}\n', 3),
        (b'{"type":"message","id":"x","created_at":"2026-01-01T00:00:00Z"}\n', 3),
        (b"[1,2]\n", 3),
        (b'{"type":"message","id":"\xff\xfe"}\n', 3),  # not UTF-8
    ],
)
@pytest.mark.parametrize("last", [False, True], ids=["middle", "last"])
async def test_damaged_complete_line_is_corrupt(
    fs: FileStore, damage: bytes, lineno: int, last: bool
) -> None:
    path = await one_entry(fs)
    add_bytes(path, damage if last else damage + line(msg("e2")))
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert "decode entry" in str(info.value)
    assert info.value.line == lineno
    assert info.value.session_id == "s1"


async def test_line_number_counts_blank_lines(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, b"\n\n" + line(msg("e2")) + b"oops\n")
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert info.value.line == 6


CUT_IN_EMOJI = line(msg("e2", "\U0001f30d\U0001f30d")).index("\U0001f30d".encode()) + 6

TORN_TAILS = {
    "905 NULs": b"\x00" * 905,
    "cut after a key": b'{"type":"message","id":"e2","created_at":',
    "partial plus 64 NULs": line(msg("e2"))[:57] + b"\x00" * 64,
    "two newlines": b"\n\n",
    "one byte": b"{",
    "cut mid string": line(msg("e2"))[:-10],
    "cut before the final brace": line(msg("e2"))[:-2],
    "cut in a multibyte character": line(msg("e2", "\U0001f30d\U0001f30d"))[:CUT_IN_EMOJI],
    "cut in an escape": b'{"type":"message","id":"e2","x":"\\u00',
    "cut in a number": b'{"type":"compaction","id":"e2","tokens_before":12',
    "cut in a literal": b'{"type":"message","id":"e2","meta":tr',
    "whitespace only": b"   ",
    "whitespace plus NULs": b"  \x00\x00",
}


@pytest.mark.parametrize("tail", list(TORN_TAILS.values()), ids=list(TORN_TAILS))
async def test_torn_tail_is_dropped(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    assert ids(await fs.load_entries("s1")) == ["e1"]
    assert (await fs.load_session("s1")).id == "s1"


async def test_cut_inside_a_multibyte_character_really_splits_it() -> None:
    # guards the test above: the cut must land inside the 4-byte emoji sequence
    raw = line(msg("e2", "\U0001f30d\U0001f30d"))[:CUT_IN_EMOJI]
    with pytest.raises(UnicodeDecodeError):
        raw.decode()


async def test_large_torn_tail_is_dropped(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2", "y" * (512 * 1024)))[:-100])
    assert ids(await fs.load_entries("s1")) == ["e1"]


@pytest.mark.parametrize("padding", [b"", b"\x00" * 30], ids=["bare", "nul-padded"])
async def test_complete_unterminated_entry_is_kept(fs: FileStore, padding: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2"))[:-1] + padding)
    loaded = await fs.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(msg("e1")), encode_entry(msg("e2"))]


@pytest.mark.parametrize(
    "tail",
    [
        b'{"type":"bogus","id":"x","created_at":"2026-01-01T00:00:00Z"}',
        b"[1,2]",
        b"123",
        b"garbage",
        b'{"type":"message"}}',
        b'{"a":1}\x00\x00{"b"',
        b'{"type":"message","id":"e2\x00x',
        b'{"type":"message","id":"\xff',
    ],
)
async def test_unterminated_line_that_is_not_torn_json_is_corrupt(
    fs: FileStore, tail: bytes
) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert "decode entry" in str(info.value)
    assert info.value.line == 3


async def test_a_512_kib_line_loads(fs: FileStore) -> None:
    await fs.create_session("s1")
    big = msg("big", "\u00e9" * (256 * 1024) + "z" * (64 * 1024))
    await fs.append_entries("s1", [big, msg("after")])
    assert len(line(big)) > 512 * 1024
    loaded = await fs.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(big), encode_entry(msg("after"))]


# -- header problems -------------------------------------------------------------------------------

GOOD_HEADER = b'{"type":"session_init","id":"s1","created_at":"2026-01-01T00:00:00Z"}'
HEADER_PROBLEMS = {
    "empty file": b"",
    "torn header": b'{"type":"session_init","id":"s1',
    "torn header plus NULs": b'{"type":"session_init","id":"s1' + b"\x00" * 40,
    "wrong type": b'{"type":"message","id":"s1","created_at":"2026-01-01T00:00:00Z"}\n',
    "wrong id": b'{"type":"session_init","id":"s2","created_at":"2026-01-01T00:00:00Z"}\n',
    "no created_at": b'{"type":"session_init","id":"s1"}\n',
    "bad created_at": b'{"type":"session_init","id":"s1","created_at":"soon"}\n',
    "not an object": b'["session_init","s1"]\n',
    "blank first line": b"\n" + GOOD_HEADER + b"\n",
    "header then garbage on the same line": GOOD_HEADER + b"x\n",
    "NULs": b"\x00" * 100,
}


@pytest.mark.parametrize("content", list(HEADER_PROBLEMS.values()), ids=list(HEADER_PROBLEMS))
async def test_header_problems_are_corrupt(root: Path, fs: FileStore, content: bytes) -> None:
    path = fresh_root(root) / "s1.jsonl"
    path.write_bytes(content)
    for call in (fs.load_entries, fs.load_session):
        with pytest.raises(CorruptSessionError) as info:
            await call("s1")
        assert "decode session" in str(info.value)
    with pytest.raises(CorruptSessionError):
        await fs.append_entries("s1", [msg("e1")])
    assert path.read_bytes() == content  # an append never "repairs" a header


async def test_unterminated_complete_header_is_fine_and_gets_its_newline(
    root: Path, fs: FileStore
) -> None:
    path = fresh_root(root) / "s1.jsonl"
    header = GOOD_HEADER
    path.write_bytes(header)
    assert await fs.load_entries("s1") == []
    assert (await fs.load_session("s1")).created_at == datetime(2026, 1, 1, tzinfo=UTC)
    await fs.append_entries("s1", [msg("e1")])
    assert path.read_bytes() == header + b"\n" + line(msg("e1"))


# -- torn-tail repair on append --------------------------------------------------------------------


@pytest.mark.parametrize("tail", list(TORN_TAILS.values()), ids=list(TORN_TAILS))
async def test_append_truncates_a_torn_tail(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    clean = path.read_bytes()
    add_bytes(path, tail)
    await fs.append_entries("s1", [msg("e3")])
    assert ids(await fs.load_entries("s1")) == ["e1", "e3"]
    kept = tail if tail.endswith(b"\n") else b""  # blank complete lines are not a tail
    assert path.read_bytes() == clean + kept + line(msg("e3"))


@pytest.mark.parametrize("padding", [b"", b"\x00" * 30], ids=["bare", "nul-padded"])
async def test_append_terminates_a_complete_tail(fs: FileStore, padding: bytes) -> None:
    path = await one_entry(fs)
    clean = path.read_bytes()
    add_bytes(path, line(msg("e2"))[:-1] + padding)
    await fs.append_entries("s1", [msg("e2"), msg("e3")])  # e2 is already stored: skipped
    assert path.read_bytes() == clean + line(msg("e2")) + line(msg("e3"))
    assert ids(await fs.load_entries("s1")) == ["e1", "e2", "e3"]


async def test_repair_by_a_store_with_a_warm_cache(fs: FileStore) -> None:
    path = await one_entry(fs)
    await fs.append_entries("s1", [msg("e2")])  # the cache now covers the whole file
    clean = path.read_bytes()
    add_bytes(path, line(msg("torn"))[:40])  # e.g. another process crashed mid-write
    await fs.append_entries("s1", [msg("e3")])
    assert path.read_bytes() == clean + line(msg("e3"))


@pytest.mark.parametrize("tail", [b"garbage", b'{"type":"bogus","id":"x","created_at":"x"}'])
async def test_append_refuses_a_damaged_tail(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    damaged = path.read_bytes()
    with pytest.raises(CorruptSessionError):
        await fs.append_entries("s1", [msg("e2")])
    assert path.read_bytes() == damaged


async def test_append_refuses_a_damaged_complete_line(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, b"not json\n")
    damaged = path.read_bytes()
    with pytest.raises(CorruptSessionError) as info:
        await fs.append_entries("s1", [msg("e2")])
    assert info.value.line == 3
    assert path.read_bytes() == damaged


# -- idempotency details of the ID index -----------------------------------------------------------


async def test_stored_line_from_another_encoder_compares_by_content(fs: FileStore) -> None:
    await fs.create_session("s1")
    path = fs.root / "s1.jsonl"
    e1 = msg("e1")
    spaced = json.dumps(json.loads(encode_entry(e1)), separators=(", ", ": ")) + "\n"
    add_bytes(path, spaced.encode())
    before = path.read_bytes()
    await fs.append_entries("s1", [e1])  # same content, other bytes: skipped
    assert path.read_bytes() == before
    with pytest.raises(EntryConflictError):
        await fs.append_entries("s1", [msg("e1", "different")])
    assert path.read_bytes() == before


async def test_store_objects_sharing_a_root_see_each_other(root: Path) -> None:
    a, b = FileStore(root), FileStore(root)
    await a.create_session("s1")
    await a.append_entries("s1", [msg("e1")])
    await b.append_entries("s1", [msg("e1"), msg("e2")])  # b's first look: e1 already there
    await a.append_entries("s1", [msg("e2"), msg("e3")])  # a's cache is stale: it reads the rest
    await b.append_entries("s1", [msg("e3")])
    with pytest.raises(EntryConflictError):
        await b.append_entries("s1", [msg("e3", "changed")])
    assert ids(await a.load_entries("s1")) == ["e1", "e2", "e3"]
    assert ids(await b.load_entries("s1")) == ["e1", "e2", "e3"]


async def test_a_replaced_file_is_not_served_from_the_cache(fs: FileStore) -> None:
    path = await one_entry(fs)
    path.unlink()
    await fs.create_session("s1")
    await fs.append_entries("s1", [msg("e1", "new life")])
    (loaded,) = await fs.load_entries("s1")
    assert loaded.message.text() == "new life"  # type: ignore[union-attr]


async def test_a_session_created_again_is_not_served_from_another_objects_cache(
    root: Path,
) -> None:
    """Another store object deletes the session and creates it again, in a file that has the
    same size and (file systems reuse a freed inode at once) the same identity as the one this
    object cached: the cache is not trusted, so an ID of the deleted session is stored anew."""
    a, b = FileStore(root, fsync=False), FileStore(root, fsync=False)
    await a.create_session("s1")
    await a.append_entries("s1", [msg("e1")])
    old = os.stat(root / "s1.jsonl")
    await b.delete_session("s1")
    await b.create_session("s1")
    header = (root / "s1.jsonl").stat().st_size
    pad = old.st_size - header - len(line(msg("x1", "t")))
    await b.append_entries("s1", [msg("x1", "t" * (1 + pad))])  # the old file's size exactly
    assert (root / "s1.jsonl").stat().st_size == old.st_size
    await a.append_entries("s1", [msg("e1")])
    assert ids(await b.load_entries("s1")) == ["x1", "e1"]


# -- OS errors -------------------------------------------------------------------------------------


def assert_unavailable(info: pytest.ExceptionInfo[StoreUnavailableError]) -> None:
    assert isinstance(info.value.__cause__, OSError)


async def test_session_path_that_is_a_directory(root: Path, fs: FileStore) -> None:
    (root / "s1.jsonl").mkdir(parents=True)
    for call in (fs.load_entries, fs.load_session):
        with pytest.raises(StoreUnavailableError) as info:
            await call("s1")
        assert_unavailable(info)
    for batch in ([msg("e1")], []):
        with pytest.raises(StoreUnavailableError) as info:
            await fs.append_entries("s1", batch)
        assert_unavailable(info)
    with pytest.raises(SessionExistsError):
        await fs.create_session("s1")


async def test_root_below_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    fs = FileStore(tmp_path / "file" / "sessions")
    with pytest.raises(StoreUnavailableError) as info:
        await fs.create_session("s1")
    assert_unavailable(info)
    with pytest.raises(StoreUnavailableError) as info:
        await fs.load_entries("s1")
    assert_unavailable(info)
    with pytest.raises(StoreUnavailableError):
        await fs.append_entries("s1", [msg("e1")])


async def test_root_that_is_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "root").write_text("not a directory")
    with pytest.raises(StoreUnavailableError) as info:
        await FileStore(tmp_path / "root").create_session("s1")
    assert_unavailable(info)


async def test_failed_header_write_leaves_no_file(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", broken)
    with pytest.raises(StoreUnavailableError):
        await fs.create_session("s1")
    assert not (fs.root / "s1.jsonl").exists()
    monkeypatch.undo()
    await fs.create_session("s1")  # not blocked by a half-made session
    assert await fs.load_entries("s1") == []


# -- locking and cancellation ----------------------------------------------------------------------


@pytest.fixture
def dir_lock_waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set when the store asks for a shared lock on a directory (i.e. waits for a create)."""
    event = threading.Event()
    real = fcntl.flock

    def spy(fd: Any, operation: int) -> None:
        if operation == fcntl.LOCK_SH and stat.S_ISDIR(os.fstat(fd).st_mode):
            event.set()
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", spy)
    yield event


@pytest.mark.parametrize("reader", ["load_entries", "load_session", "append_entries"])
async def test_reader_waits_for_a_create_in_progress(
    root: Path, fs: FileStore, dir_lock_waits: threading.Event, reader: str
) -> None:
    """A reader that finds the file before its header waits for the creator, not raise Corrupt."""
    path = fresh_root(root) / "s1.jsonl"
    dirfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(dirfd, fcntl.LOCK_EX)  # play the creator: O_EXCL done, header not yet written
        path.touch()
        calls: dict[str, Callable[[], Any]] = {
            "load_entries": lambda: fs.load_entries("s1"),
            "load_session": lambda: fs.load_session("s1"),
            "append_entries": lambda: fs.append_entries("s1", [msg("e1")]),
        }
        task = asyncio.ensure_future(calls[reader]())
        # the reader must see the empty file and wait for the lock, not finish (raising Corrupt)
        waiting = asyncio.ensure_future(asyncio.to_thread(dir_lock_waits.wait, 30))
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        assert not task.done()
        assert await waiting
        header = {"type": "session_init", "id": "s1", "created_at": format_time(T0)}
        path.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n")
    finally:
        fcntl.flock(dirfd, fcntl.LOCK_UN)
        os.close(dirfd)
    await task
    if reader == "append_entries":
        assert ids(await fs.load_entries("s1")) == ["e1"]


async def test_started_write_completes_when_the_caller_is_cancelled(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fs.create_session("s1")
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    real = fs._append_sync

    def slow(*args: Any) -> None:
        started.set()
        release.wait()
        try:
            real(*args)
        finally:
            finished.set()

    monkeypatch.setattr(fs, "_append_sync", slow)
    task = asyncio.ensure_future(fs.append_entries("s1", [msg("e1"), msg("e2")]))
    await asyncio.to_thread(started.wait)
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(finished.wait)
    assert ids(await fs.load_entries("s1")) == ["e1", "e2"]
    monkeypatch.undo()
    await fs.append_entries("s1", [msg("e1"), msg("e2")])  # the retry is a no-op
    assert ids(await fs.load_entries("s1")) == ["e1", "e2"]


async def test_a_write_queued_behind_busy_threads_completes_when_the_caller_is_cancelled(
    fs: FileStore,
) -> None:
    """The write is handed to the thread pool when the call starts, before any thread is free:
    cancelling the caller while it waits in the queue still lets it run (nothing half-done)."""
    await fs.create_session("s1")
    loop = asyncio.get_running_loop()
    hold = threading.Event()
    busy = [loop.run_in_executor(None, hold.wait) for _ in range(64)]  # more than the pool
    task = asyncio.ensure_future(fs.append_entries("s1", [msg("e1")]))
    await asyncio.sleep(0)  # the call has started: its write is queued behind the busy threads
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    hold.set()
    await asyncio.gather(*busy)
    # the pool runs its queue in order: this load runs after the queued write
    assert ids(await fs.load_entries("s1")) == ["e1"]


# -- the torn-JSON classifier ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", " ", "{", '{"a"', '{"a":', '{"a":1', '{"a":1.', '{"a":-', '{"a":1e', '{"a":1e+',
     '{"a":tr', '{"a":nul', '{"a":"x\\u12', '{"a":"x\\', '{"a":[1,2', '{"a":[]', '[{"b":{}',
     '"abc', '{"a":{"b":"c"},'],
)  # fmt: skip
def test_prefixes_of_json(text: str) -> None:
    assert is_json_prefix(text)


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', "{}", '{"a":1}x', "x", '{"a":1,}', "{,", '{"a" 1', "[1,]", "01", '{"a":01',
     '{"a":1.e5', '{"a":"\x01', '{"a":"\\x', '{"a":tx', "]", '{"a":]', '{"a":1]', "[1}"],
)  # fmt: skip
def test_not_prefixes_of_json(text: str) -> None:
    assert not is_json_prefix(text)
