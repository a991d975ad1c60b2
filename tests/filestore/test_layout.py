"""FileStore layout, its ID index and what OS errors become (docs/design.md#file-store).

A session is one file that only grows: a header line, then one line per entry.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from durable_agent.ai.timefmt import format_time
from durable_agent.session import (
    EntryConflictError,
    InvalidSessionIdError,
    MessageEntry,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    encode_entry,
)
from durable_agent.stores import FileStore
from tests.filestore.helpers import add_bytes, ids, line, listing, msg, one_entry

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
    assert isinstance(loaded, MessageEntry) and loaded.message.text() == "new life"


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


async def test_listing_a_root_that_is_a_regular_file_fails(tmp_path: Path) -> None:
    """A root that cannot be listed is no empty store: "no sessions" would mislead an operator
    (a mistyped ``--store``, a directory this user may not read)."""
    (tmp_path / "root").write_text("not a directory")
    with pytest.raises(StoreUnavailableError) as info:
        await FileStore(tmp_path / "root").list_sessions()
    assert_unavailable(info)
    assert await FileStore(tmp_path / "missing").list_sessions() == []  # nothing created yet


async def test_a_directory_named_like_a_session_is_left_out_of_the_listing(
    root: Path, fs: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    """One odd entry in the root is left out with a warning, as a damaged file is, and does not
    hide every other session."""
    await fs.create_session("s1")
    (root / "odd.jsonl").mkdir()
    assert [r.id for r in await fs.list_sessions()] == ["s1"]
    assert any("not listed" in r.getMessage() and "odd" in r.getMessage() for r in caplog.records)


async def test_a_prefixed_listing_opens_no_other_session_file(
    root: Path, fs: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    """With a prefix, only the files named by it are read: another tenant's damaged file is
    neither read nor warned about (without a prefix it is, as the check that it would be)."""
    await fs.create_session("acme:1")
    await fs.create_session("bolt:1")
    (root / "bolt:1.jsonl").write_bytes(b"not a header\n")
    assert [r.id for r in await fs.list_sessions(prefix="acme:")] == ["acme:1"]
    assert not caplog.records
    assert [r.id for r in await fs.list_sessions()] == ["acme:1"]
    assert any(
        "not listed" in r.getMessage() and "bolt:1" in r.getMessage() for r in caplog.records
    )


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
