"""FileStore: one append-only JSON Lines file per session (docs/design.md#file-store).

``<root>/<session_id>.jsonl`` starts with a ``session_init`` header line, then one
``encode_entry`` object per line. A crash at any moment leaves a file that still loads: a write
is one ``write`` of whole lines; a torn final line (a strict prefix of JSON, maybe padded with
NULs) is dropped on load and truncated before the next append; a damaged *complete* line is
reported, never skipped.

Concurrency: an append takes an exclusive ``flock`` on the session file, a load a shared one, so
store objects and processes on one host can share ``root``. ``create_session`` holds an exclusive
``flock`` on the root directory while it writes the header; a reader finding a missing or torn
header waits on that lock once and looks again, never mistaking a session being created for a
corrupt one. I/O runs in a worker thread, except a follower's small reads (``.follow``). Seams:
``lines`` (what a line means), ``index`` (the append-side ID index), ``io`` (locks, whole
writes), ``deltas`` (live-delta side files), and this module (the store's verbs).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import IO, Any, TypeVar

from ...ai.timefmt import utc_now
from ...session.appendplan import Guard, encode_batch, plan_append
from ...session.entries import Entry
from ...session.errors import (
    CorruptSessionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ...session.ids import validate_session_id
from ...session.store import (
    DEFAULT_PAGE,
    Closing,
    SessionRecord,
    check_after,
    check_page,
    newest_first,
)
from ..memory import DEFAULT_MAX_ENTRY_BYTES, check_parent_id
from .deltas import FileDeltas
from .follow import Marks, read_after, read_last, read_now
from .index import Index, Recent, covers, digest, header_line, scan_ids, stored_lookup
from .io import FILE_MODE, append_all, ensure_root, finish, flock, open_dir, posix_locks, write_all
from .lines import (
    HeaderProblem,
    Tail,
    decode_lines,
    header_bytes,
    list_records,
    names_another,
    read_header,
    read_lines,
)

__all__ = ["FileStore"]

T = TypeVar("T")


class FileStore(Closing):
    """A :class:`~durable_agent.session.Store` keeping each session in ``<root>/<id>.jsonl``.

    ``fsync=False`` skips the file and directory fsyncs (faster; a power loss may lose the latest
    appends, but a crash of the process alone loses nothing). ``max_entry_bytes`` bounds one entry's
    encoding; a bigger entry raises ``EntryTooLargeError`` and nothing of its batch is written.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
    ) -> None:
        posix_locks()  # fail here, clearly, on a platform without flock
        self._root = Path(root)
        self._fsync = fsync
        self._max_entry_bytes = max_entry_bytes
        self._indexes: Recent[Index] = Recent(256)
        self._marks = Marks(64)
        self._deltas: FileDeltas | None = None

    @property
    def root(self) -> Path:
        """The directory holding the session files."""
        return self._root

    def path(self, session_id: str) -> Path:
        """The file of ``session_id`` (validated first, so no ID ever escapes ``root``)."""
        return self._root / f"{validate_session_id(session_id)}.jsonl"

    def live_deltas(self) -> FileDeltas:
        """This store's live-delta channel: side files under ``root`` (one per store object)."""
        if self._deltas is None:
            self._deltas = FileDeltas(self._root)
        return self._deltas

    async def _release(self) -> None:
        """Close the live-delta files this store object holds open (replies it was following)."""
        if self._deltas is not None:
            self._deltas.close()

    # -- protocol ----------------------------------------------------------------------------------

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Create the file (``O_CREAT|O_EXCL``) with its header; ``SessionExistsError`` if taken."""
        path = self.path(session_id)
        parent = check_parent_id(parent_id)
        record = SessionRecord(id=session_id, parent_id=parent, created_at=utc_now())
        await finish(lambda: self._guard(self._create_sync, path, record))
        return record

    async def load_session(self, session_id: str) -> SessionRecord:
        """The record from the header line; ``SessionNotFoundError`` if there is no file."""
        path = self.path(session_id)
        return await asyncio.to_thread(self._guard, self._load_session_sync, path, session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        """Every entry in append order; a torn final line is dropped, damage elsewhere raised."""
        path = self.path(session_id)
        return await asyncio.to_thread(self._guard, self._load_entries_sync, path, session_id)

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        """At most ``limit`` entries after seq ``after`` (:class:`~durable_agent.session.SeqStore`)
        from a mark kept per followed file, read up to the last one's line (:mod:`.follow`):
        nothing new is one ``stat`` on the event loop, a small tail a read there."""
        path, after = self.path(session_id), check_after(after, limit)
        found = self._guard(read_now, path, session_id, after, self._marks, limit)
        if found is not None:
            return found
        read = partial(read_after, after=after, marks=self._marks, path=path, limit=limit)
        return await asyncio.to_thread(self._guard, self._shared_sync, path, session_id, read)

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None:
        """The last entry and its seq (:class:`~durable_agent.session.LastEntryStore`): the
        file's mark brought to its end counting lines, its last entry's line alone decoded."""
        path = self.path(session_id)
        read = partial(read_last, marks=self._marks, path=path)
        return await asyncio.to_thread(self._guard, self._shared_sync, path, session_id, read)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append the new entries of ``entries`` in one write; idempotent by entry ID.

        A write that fails partway (a short write, then ``ENOSPC``) is cut back to the size before
        it, so the call raises ``StoreUnavailableError`` and nothing of the batch stays.
        """
        await self._append(session_id, entries, None)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """``append_entries`` if the newest stored entry not of the batch is ``last_id``, checked
        under the file's lock (:class:`~durable_agent.session.GuardedStore`)."""
        return await self._append(session_id, entries, Guard(last_id))

    async def _append(self, session_id: str, entries: Sequence[Entry], guard: Guard | None) -> bool:
        path = self.path(session_id)
        batch = encode_batch(session_id, entries, limit=self._max_entry_bytes)
        sync = self._append_sync
        return await finish(lambda: self._guard(sync, path, session_id, batch, guard))

    # -- retention ---------------------------------------------------------------------------------

    async def list_sessions(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0, prefix: str = ""
    ) -> list[SessionRecord]:
        """One page of records, newest first, from each file's header line only (never the
        entries); with ``prefix``, only the files whose name (the ID) starts with it are opened.
        A file whose name is no session ID is not listed, nor one whose header is damaged or
        unreadable (a warning names the file); a root that cannot be read is
        ``StoreUnavailableError``. Each page reads every matching header (N per page)."""
        prefix = check_page(limit, offset, prefix)
        load = self._load_session_sync
        records = await asyncio.to_thread(self._guard, list_records, self._root, load, prefix)
        return newest_first(records)[offset : offset + limit]

    async def delete_session(self, session_id: str) -> None:
        """Remove the session's file (its header is its record) and its live-delta side files;
        ``SessionNotFoundError`` if there is none. An append waiting on the file's lock then
        finds the file unlinked and raises ``SessionNotFoundError`` rather than writing into
        the removed file."""
        path = self.path(session_id)
        await finish(lambda: self._guard(self._delete_sync, path, session_id))

    def _delete_sync(self, path: Path, session_id: str) -> None:
        # No root lock: create is O_EXCL, so while the file exists nobody can replace it, and
        # taking the root lock here could deadlock with a reader waiting for a create.
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            with flock(fd, exclusive=True):  # appends and loads in flight finish first
                # gone (a concurrent delete won), or another's file (docs/design.md#file-store)
                if os.fstat(fd).st_nlink == 0 or names_another(os.pread(fd, 4096, 0), session_id):
                    raise SessionNotFoundError(session_id)
                path.unlink()
        finally:
            os.close(fd)
            self._indexes.forget(path)
            self._marks.forget(path)
        self.live_deltas().drop_session(session_id)
        if self._fsync:
            with open_dir(self._root) as dirfd:
                os.fsync(dirfd)

    # -- plumbing ----------------------------------------------------------------------------------

    def _guard(self, fn: Callable[..., T], *args: Any) -> T:
        """An OSError becomes StoreUnavailableError; a CorruptSessionError names the file."""
        self._check_open()
        try:
            return fn(*args)
        except OSError as exc:
            raise StoreUnavailableError(f"file store {self._root}: {exc}") from exc
        except CorruptSessionError as exc:
            if exc.path or not args or not isinstance(args[0], Path):
                raise
            raise exc.at(str(args[0].absolute())) from exc.__cause__

    def _retry_after_create(self, read: Callable[[], T], session_id: str) -> T:
        """Run ``read``; on a header problem wait for any running create and read once more."""
        try:
            return read()
        except HeaderProblem:
            pass
        # the root's flock, held exclusive while a header is written: shared, it waits for that
        with open_dir(self._root) as dirfd, flock(dirfd, exclusive=False):
            try:
                return read()
            except HeaderProblem as exc:
                raise CorruptSessionError(session_id, f"decode session: {exc}", line=1) from None

    # -- create ------------------------------------------------------------------------------------

    def _create_sync(self, path: Path, record: SessionRecord) -> None:
        ensure_root(self._root)
        header = header_bytes(record.id, record.parent_id, record.created_at)
        with open_dir(self._root) as dirfd:
            with flock(dirfd, exclusive=True):
                fd = self._create_file(path, record.id)
                try:
                    self._write_header(fd, path, header)
                finally:
                    os.close(fd)
            if self._fsync:
                os.fsync(dirfd)

    @staticmethod
    def _create_file(path: Path, session_id: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(path, flags, FILE_MODE)
        except FileExistsError:
            raise SessionExistsError(session_id) from None

    def _write_header(self, fd: int, path: Path, header: bytes) -> None:
        """Write and sync the header; if that fails, remove the file rather than leave it empty."""
        try:
            os.fchmod(fd, FILE_MODE)  # open's mode is filtered by the umask
            write_all(fd, header)
            if self._fsync:
                os.fsync(fd)
        except OSError:
            path.unlink(missing_ok=True)
            raise

    # -- load --------------------------------------------------------------------------------------

    @staticmethod
    @contextmanager
    def _open_shared(path: Path, session_id: str) -> Iterator[IO[bytes]]:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below, after the lock is released
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            with flock(f.fileno(), exclusive=False):
                yield f
        finally:
            f.close()

    def _load_session_sync(self, path: Path, session_id: str) -> SessionRecord:
        return self._shared_sync(path, session_id, read_header)

    def _load_entries_sync(self, path: Path, session_id: str) -> list[Entry]:
        def read() -> list[Entry]:
            with self._open_shared(path, session_id) as f:
                lines = list(read_lines(f, 0))
            # Decoding is the slow part: do it after the lock is released, so a long load never
            # holds up appenders in other threads or processes.
            return decode_lines(lines, session_id)

        return self._retry_after_create(read, session_id)

    def _shared_sync(self, path: Path, sid: str, read: Callable[[IO[bytes], str], T]) -> T:
        """``read(f, sid)`` of the shared-locked file, again once a create it met is done."""

        def locked() -> T:
            with self._open_shared(path, sid) as f:
                return read(f, sid)

        return self._retry_after_create(locked, sid)

    # -- append ------------------------------------------------------------------------------------

    def _append_sync(
        self, path: Path, session_id: str, batch: list[tuple[Entry, str]], guard: Guard | None
    ) -> bool:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            if not batch and guard is None:
                return True
            with flock(fd, exclusive=True):
                return self._append_locked(fd, path, session_id, batch, guard)
        finally:
            os.close(fd)

    def _append_locked(
        self,
        fd: int,
        path: Path,
        session_id: str,
        batch: list[tuple[Entry, str]],
        guard: Guard | None,
    ) -> bool:
        index = self._retry_after_create(
            lambda: self._current_index(fd, path, session_id), session_id
        )
        stored = stored_lookup(fd, index, batch)
        todo = plan_append(session_id, batch, stored, holds=index.ids.__contains__)
        if guard is not None and not guard.holds(reversed(index.ids), batch):
            return False  # another append came after the entry the caller read
        if not todo:
            return True
        lines = [(wire + "\n").encode("utf-8") for _, wire in todo]
        try:
            append_all(fd, b"".join(lines), size=index.end, sync=self._fsync)
        except BaseException:
            self._indexes.forget(path)  # the rollback itself may have failed: rescan next time
            raise
        for (entry, _), line in zip(todo, lines, strict=True):
            index.ids.setdefault(entry.id, (index.end, digest(line[:-1]), index.lines + 1))
            index.end += len(line)
            index.lines += 1
        return True

    def _current_index(self, fd: int, path: Path, session_id: str) -> Index:
        """The ID index of the locked file, read only past what the cache already covers; repairs
        a torn tail on the way so the file ends in ``\\n`` before anything is appended."""
        st = os.fstat(fd)
        if st.st_nlink == 0:  # delete_session removed it while we waited for the lock
            raise SessionNotFoundError(session_id)
        file_key = (st.st_dev, st.st_ino)
        if st.st_size == 0:
            raise HeaderProblem("empty file")
        index = self._indexes.get(path)
        if index is None or not covers(fd, index, file_key, st.st_size):
            index = Index(file_key, header=header_line(fd))
        if index.end < st.st_size:
            with open(fd, "rb", closefd=False) as f:
                scan = scan_ids(f, session_id, index.end, index.lines)
            for found in scan.found:
                index.add(fd, session_id, found)
            index.end, index.lines = scan.end, scan.lines
            if scan.tail is not None:
                self._repair(fd, session_id, index, scan.tail)
        self._indexes.put(path, index)
        return index

    def _repair(self, fd: int, session_id: str, index: Index, tail: Tail) -> None:
        """Make the file end in ``\\n``: drop a torn or blank tail, or terminate a complete one
        (cutting any NUL padding after it), and account for it in ``index``."""
        os.ftruncate(fd, tail.offset + tail.keep)
        if tail.keep:
            write_all(fd, b"\n")
            index.lines += 1
            if tail.entry is not None:
                body = os.pread(fd, tail.keep, tail.offset)
                index.add(fd, session_id, (tail.offset, digest(body), tail.entry.id, index.lines))
        if self._fsync:
            os.fsync(fd)
        index.end = tail.offset + tail.keep + (1 if tail.keep else 0)
