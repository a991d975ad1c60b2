"""FileStore under failing writes and hand-damaged files (docs/design.md#file-store).

Faults are injected into the real store's write path (``os.write``, ``os.fsync``), and files are
damaged by writing bytes directly, as a disk fault or an operator's editor would leave them.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_agent.session import (
    CorruptSessionError,
    StoreUnavailableError,
)
from durable_agent.stores import FileStore
from tests.filestore.helpers import add_bytes, line, msg, one_entry

DEEP = 100_000


@pytest.fixture(params=[True, False], ids=["fsync", "no-fsync"])
def fs(request: pytest.FixtureRequest, tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "sessions", fsync=request.param)


# -- a write that fails partway ------------------------------------------------------------------


def short_then_enospc(real: Callable[[int, bytes], int], cut: int) -> Callable[[int, bytes], int]:
    """An ``os.write`` that writes only ``cut`` bytes of the first call, then fails with ENOSPC."""
    calls = 0

    def write(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real(fd, bytes(data)[:cut])
        raise OSError(errno.ENOSPC, "No space left on device")

    return write


async def test_short_write_then_enospc_leaves_nothing_of_the_batch(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await one_entry(fs)
    before = path.read_bytes()
    batch = [msg("e2"), msg("e3"), msg("e4")]
    two_lines = len(line(batch[0])) + len(line(batch[1]))
    monkeypatch.setattr(os, "write", short_then_enospc(os.write, two_lines))
    with pytest.raises(StoreUnavailableError) as info:
        await fs.append_entries("s1", batch)
    monkeypatch.undo()
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert path.read_bytes() == before
    assert [e.id for e in await fs.load_entries("s1")] == ["e1"]
    assert [e.id for e in await FileStore(fs.root).load_entries("s1")] == ["e1"]
    # The same store object (its cached index included) takes the retry whole.
    await fs.append_entries("s1", batch)
    assert [e.id for e in await fs.load_entries("s1")] == ["e1", "e2", "e3", "e4"]


async def test_a_torn_half_line_is_cut_back_too(
    fs: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await one_entry(fs)
    before = path.read_bytes()
    monkeypatch.setattr(os, "write", short_then_enospc(os.write, 7))
    with pytest.raises(StoreUnavailableError):
        await fs.append_entries("s1", [msg("e2")])
    monkeypatch.undo()
    assert path.read_bytes() == before


async def test_failed_fsync_cuts_the_batch_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = FileStore(tmp_path / "sessions")
    path = await one_entry(fs)
    before = path.read_bytes()
    real_fsync = os.fsync
    synced_sizes: list[int] = []

    def failing_once(fd: int) -> None:
        if not synced_sizes:
            synced_sizes.append(os.fstat(fd).st_size)
            raise OSError(errno.EIO, "Input/output error")
        synced_sizes.append(os.fstat(fd).st_size)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_once)
    with pytest.raises(StoreUnavailableError):
        await fs.append_entries("s1", [msg("e2"), msg("e3")])
    monkeypatch.undo()
    assert path.read_bytes() == before
    # The rollback is synced: the second fsync saw the file already cut back.
    assert synced_sizes == [len(before) + len(line(msg("e2"))) + len(line(msg("e3"))), len(before)]


# -- hand-damaged files --------------------------------------------------------------------------


def deep_line(entry_id: str, depth: int = DEEP) -> bytes:
    """A message line whose tool-call arguments nest ``depth`` lists deep."""
    body = "[" * depth + "]" * depth
    head = (
        f'{{"type":"message","id":"{entry_id}","created_at":"2026-01-02T03:04:05Z","message":'
        '{"role":"assistant","content":[{"type":"tool_call","id":"c1","name":"t",'
        '"arguments":{"x":'
    )
    return (head + body + "}}]}}\n").encode()


async def test_deeply_nested_line_is_corrupt_not_recursion_error(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, deep_line("e2"))
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert info.value.session_id == "s1"
    assert info.value.line == 3
    assert "decode entry" in str(info.value)
    with pytest.raises(CorruptSessionError) as appended:
        await fs.append_entries("s1", [msg("e3")])
    assert appended.value.line == 3


async def test_a_damaged_session_names_its_file_whatever_reads_it(fs: FileStore) -> None:
    """The operator must repair or remove the file: every verb's error names it, absolute."""
    path = await one_entry(fs)
    add_bytes(path, b"{not json\n")
    for read in (
        lambda: fs.load_entries("s1"),
        lambda: fs.load_entries_after("s1", 0),
        lambda: fs.append_entries("s1", [msg("e3")]),
        lambda: FileStore(fs.root).load_entries_after("s1", 1),
    ):
        with pytest.raises(CorruptSessionError) as info:
            await read()
        assert info.value.path == str(path.absolute()) and info.value.line == 3
        assert str(info.value).endswith(f"(line 3) in {path.absolute()}")
    path.write_bytes(b"not a header\n")
    with pytest.raises(CorruptSessionError) as header:
        await fs.load_session("s1")
    assert header.value.path == str(path.absolute()) and header.value.line == 1


async def test_deeply_nested_complete_tail_is_corrupt(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, deep_line("e2")[:-1])  # complete JSON, no final newline
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert info.value.line == 3
    with pytest.raises(CorruptSessionError):
        await fs.append_entries("s1", [msg("e3")])


async def test_deeply_nested_torn_tail_is_dropped(fs: FileStore) -> None:
    path = await one_entry(fs)
    whole = deep_line("e2")
    add_bytes(path, whole[: len(whole) // 2])  # torn in the middle of the nesting
    assert [e.id for e in await fs.load_entries("s1")] == ["e1"]
    await fs.append_entries("s1", [msg("e3")])
    assert [e.id for e in await fs.load_entries("s1")] == ["e1", "e3"]


async def test_deeply_nested_header_is_corrupt(fs: FileStore) -> None:
    fs.root.mkdir()
    (fs.root / "s1.jsonl").write_bytes(b"[" * DEEP + b"]" * DEEP + b"\n")
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert "decode session" in str(info.value)
    with pytest.raises(CorruptSessionError):
        await fs.load_session("s1")


async def test_repeated_entry_id_with_same_encoding_loads_once(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2")) + line(msg("e1")))  # e1 again, byte for byte
    assert [e.id for e in await fs.load_entries("s1")] == ["e1", "e2"]
    await fs.append_entries("s1", [msg("e3")])
    assert [e.id for e in await FileStore(fs.root).load_entries("s1")] == ["e1", "e2", "e3"]


async def test_repeated_entry_id_with_other_content_is_corrupt(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2")) + line(msg("e1", "edited by hand")))
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert info.value.session_id == "s1"
    assert info.value.line == 4
    assert "'e1'" in str(info.value)
    assert "line 2" in str(info.value)
    with pytest.raises(CorruptSessionError) as appended:
        await FileStore(fs.root).append_entries("s1", [msg("e3")])
    assert appended.value.line == 4
