"""The operating-system side of FileStore: locks, whole writes that roll back, worker threads.

``fcntl`` is imported only when a FileStore needs a lock (never at ``import durable_agent``), so
the package imports on platforms without POSIX file locks (Windows), where MemoryStore and
MongoStore work and constructing a FileStore raises ``NotImplementedError`` saying so.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "append_all",
    "ensure_root",
    "finish",
    "flock",
    "open_dir",
    "posix_locks",
    "write_all",
]

T = TypeVar("T")

DIR_MODE = 0o755
FILE_MODE = 0o644


def posix_locks() -> ModuleType:
    """The ``fcntl`` module, or ``NotImplementedError`` where the platform has none."""
    try:
        import fcntl
    except ImportError as exc:
        raise NotImplementedError(
            "FileStore needs POSIX file locks (fcntl), which this platform lacks; "
            "use MemoryStore or MongoStore here"
        ) from exc
    return fcntl


@contextmanager
def flock(fd: int, *, exclusive: bool) -> Iterator[None]:
    """Hold an exclusive or shared ``flock`` on ``fd`` for the block."""
    fcntl = posix_locks()
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def open_dir(root: Path) -> Iterator[int]:
    """A descriptor of ``root`` for its lock and its fsync, closed on the way out."""
    dirfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield dirfd
    finally:
        os.close(dirfd)


def ensure_root(root: Path) -> None:
    """Create ``root`` (and missing parents) with mode 0755 if it does not exist."""
    try:
        os.mkdir(root, DIR_MODE)
    except FileExistsError:
        return
    except FileNotFoundError:
        os.makedirs(root.parent, exist_ok=True)
        try:
            os.mkdir(root, DIR_MODE)
        except FileExistsError:
            return
    os.chmod(root, DIR_MODE)  # mkdir's mode is filtered by the umask


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until done: one call in practice; a short write is continued, not dropped."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def append_all(fd: int, data: bytes, *, size: int, sync: bool) -> None:
    """Append ``data`` to a locked file of ``size`` bytes, all of it or none of it.

    If a write fails partway (a short write, then ``ENOSPC``) or the fsync fails, the file is cut
    back to ``size`` (and that is synced) before the error propagates, so a failed append leaves
    no line of its batch behind: the caller's handle and the store keep agreeing.
    """
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException:
        try:
            os.ftruncate(fd, size)
            if sync:
                os.fsync(fd)
        except OSError:
            pass  # the original error says more; the caller forgets its cached index
        raise


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a shielded write's outcome so an abandoned failure is not logged as unretrieved."""
    if not task.cancelled():
        task.exception()


async def finish(call: Callable[[], T]) -> T:
    """Run a write in a worker thread and see it through even if the caller is cancelled.

    Cancellation before this point has no effect; after it, the write completes (the caller may
    still see ``CancelledError``) and a retry is an idempotent no-op.
    """
    # submitted here, not from a task that starts on the next loop iteration (as
    # ``asyncio.to_thread`` would be): the write is on the critical path of every turn
    future = asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, call)
    future.add_done_callback(_consume)
    return await asyncio.shield(future)
