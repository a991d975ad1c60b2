"""FileStore locking and cancellation: readers wait for a create in progress, and a started write
completes when its caller is cancelled (docs/design.md#file-store).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_agent.ai.timefmt import format_time
from durable_agent.stores import FileStore
from tests.filestore.helpers import T0, fresh_root, ids, msg
from tests.support.polling import eventually

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

    async def written() -> bool:
        # the pool starts its queue in order, but a load on another of its threads may run
        # while the write is still going: the write completes on its own, so wait for it
        return ids(await fs.load_entries("s1")) == ["e1"]

    await eventually(written, within=10, what="the queued write")
