"""The live-delta channel of a FileStore: side files next to the session file.

A reply's deltas go to ``<root>/<session_id>.live/<run>.<turn>.jsonl``, one JSON line per
delta, appended with ``O_APPEND`` (a reader ignores a last line without its newline: a write in
progress). A reader polls while a reply streams, so the channel keeps the file it reads open and
remembers how far it read: a poll is one ``fstat`` (that file is still linked) and one
``pread`` of the new lines. It lets the file go after the reply's ``final`` delta (its reader
reads no more), and whatever it kept that is unlinked as it opens another: an open descriptor
keeps a deleted session's text on disk (docs/design.md#retention). Both ends call it on their
event loop (:class:`~durable_agent.session.deltas.ImmediateChannel`): a small local write or
read costs less than the task, thread or timeout around it would. The file is removed shortly
after the reply is stored, and the directory with its last file, so a session's side files only
ever hold the replies being streamed. Store listings glob
``*.jsonl`` in the root only, so they never see these files (docs/design.md#live-deltas).

What a worker never cleared (it crashed, or shut down before its delayed clear ran) is swept as
MongoDB's TTL index expires its documents: when a store object starts streaming a reply (at most
once a minute), every file not written for ``ttl`` seconds goes, and every file of a session
that no longer exists. ``delete_session`` removes the session's directory at once, and a reply's
delta written after that (a run still streaming when another process deleted its session) is
removed as soon as it is written (docs/design.md#retention).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ...session.deltas import Cursor, Delta, DeltaKey
from ...session.errors import InvalidSessionIdError, SessionNotFoundError
from ...session.ids import validate_session_id

__all__ = ["DEFAULT_TTL", "FileDeltas"]

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SUFFIX = ".live"

DEFAULT_TTL = 600
"""Seconds after which a side file nobody wrote to is swept (MongoStore's TTL, the same)."""

_SWEEP_EVERY = 60.0
"""Seconds between two sweeps of the root by one channel object."""
_PATHS = 256
"""Key paths a channel remembers (least recently named dropped first)."""
_OPEN_MARKS = 32
"""Side files a channel keeps open to read on from where it read to (least recently read closed
first): a client follows one reply of a run at a time."""
_CHUNK = 1 << 16


@dataclass
class _Mark:
    """How far a channel read one side file: the descriptor it keeps open, the offset after
    the last complete line read, the highest ``(attempt, seq)`` before it."""

    fd: int
    offset: int = 0
    highest: Cursor = (0, 0)


def _read_from(fd: int, offset: int) -> bytes:
    """Everything from ``offset`` to the end of the open file ``fd``."""
    parts = [os.pread(fd, _CHUNK, offset)]
    while len(parts[-1]) == _CHUNK:
        offset += _CHUNK
        parts.append(os.pread(fd, _CHUNK, offset))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _close_marks(marks: OrderedDict[str, _Mark]) -> None:
    for mark in marks.values():
        with contextlib.suppress(OSError):
            os.close(mark.fd)
    marks.clear()


def _linked(fd: int) -> bool:
    """Whether the open file ``fd`` is still linked: not cleared, swept, or written anew (the
    old file is unlinked first). An ``fstat`` of the descriptor, not a ``stat`` of the path: a
    reader asks this at every read of a streaming reply, after an idle wait, when a path walk
    costs several times more."""
    try:
        return os.fstat(fd).st_nlink > 0
    except OSError:
        return False


class FileDeltas:
    """Deltas as side files under a FileStore's ``root``."""

    def __init__(self, root: str | os.PathLike[str], *, ttl: float = DEFAULT_TTL) -> None:
        self._root = Path(root)
        self._ttl = ttl
        self._swept_at: float | None = None
        self._read_to: OrderedDict[str, _Mark] = OrderedDict()
        """Path -> how far this channel read that file (at most ``_OPEN_MARKS``)."""
        # a reader stops at the stored reply, so the file's last descriptor often stays open
        # after the worker deletes it: closed with the channel (one store object per request
        # would otherwise leak one per reply followed, for the life of the process)
        weakref.finalize(self, _close_marks, self._read_to)
        self._paths: OrderedDict[DeltaKey, str] = OrderedDict()
        """Recently named keys' paths (writers and readers name one key many times a second)."""
        self._last: tuple[DeltaKey | None, str] = (None, "")
        """The key named last (the same key object, a reader's, names it again) and its path."""

    def close(self) -> None:
        """Close the files this channel keeps open (its store object was closed)."""
        _close_marks(self._read_to)

    def directory(self, session_id: str) -> Path:
        return self._root / f"{validate_session_id(session_id)}{_SUFFIX}"

    def path(self, key: DeltaKey) -> Path:
        run = key.run_id
        if not _SAFE.fullmatch(run):
            run = hashlib.sha256(run.encode("utf-8")).hexdigest()[:32]
        return self.directory(key.session_id) / f"{run}.{key.turn}.jsonl"

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        self.publish_now(key, delta)

    def publish_now(self, key: DeltaKey, delta: Delta) -> None:
        """Append ``delta``'s line (one small write, no fsync); ``SessionNotFoundError``, and
        nothing kept, when a reply's session is gone (:meth:`_kept`)."""
        path = self._path(key)
        line = (delta.model_dump_json() + "\n").encode("utf-8")
        if delta.seq == 1:
            now = time.monotonic()
            if self._swept_at is None or now - self._swept_at > _SWEEP_EVERY:
                self._swept_at = now
                self.sweep()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if key.turn:
            self._kept(key, path)

    def _kept(self, key: DeltaKey, path: str) -> None:
        """Undo the write of a reply's delta whose session file is gone: the session was
        deleted, and the delete's removal of its side files may have come before this write
        (docs/design.md#retention). One ``stat`` after the write, so a delete at any moment is
        seen; a cancel note (turn 0, no text) is kept: it stops the deleted session's calls."""
        if os.path.exists(os.path.join(self._root, f"{key.session_id}.jsonl")):
            return
        self._forget(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(path))  # only when empty: a cancel note may be there
        raise SessionNotFoundError(key.session_id)

    def _path(self, key: DeltaKey) -> str:
        """:meth:`path` as a string, remembered: a writer and a reader name the same key a few
        times a second, and building the path (a session ID check included) costs more than
        the write."""
        if key is self._last[0]:
            return self._last[1]
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = str(self.path(key))
            while len(self._paths) > _PATHS:
                self._paths.popitem(last=False)
        self._last = (key, path)
        return path

    async def held(self, keys: list[DeltaKey]) -> set[DeltaKey]:
        return self.held_now(keys)

    def held_now(self, keys: list[DeltaKey]) -> set[DeltaKey]:
        """Which of ``keys`` hold any delta: one ``stat`` each (a worker watching the cancel
        notes of its calls in flight asks this twice a second)."""
        found: set[DeltaKey] = set()
        for key in keys:
            try:
                if os.stat(self._path(key)).st_size:
                    found.add(key)
            except FileNotFoundError:
                continue
        return found

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        return self.read_now(key, after)

    def read_now(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        """The deltas past ``after``: read on from the mark when everything before it is at or
        before ``after``, else from the start of the file."""
        path = self._path(key)
        mark = self._read_to.get(path)
        # the file kept open must still be linked (its path names no other file then): an
        # unlinked file's unread lines belong to a cleared reply or a deleted session
        # (docs/design.md#retention)
        if mark is not None and after >= mark.highest and _linked(mark.fd):
            return self._take(path, mark, _read_from(mark.fd, mark.offset), after)
        self._forget(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return []
        # a reply's first read (once per reply): the files kept open that are gone meanwhile
        # (cleared, or a session deleted by another process) go too, not after 32 more replies
        for kept in [p for p, m in self._read_to.items() if not _linked(m.fd)]:
            self._forget(kept)
        try:
            mark = _Mark(fd)
            data = _read_from(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        self._read_to[path] = mark
        while len(self._read_to) > _OPEN_MARKS:
            os.close(self._read_to.popitem(last=False)[1].fd)
        return self._take(path, mark, data, after)

    def _take(self, path: str, mark: _Mark, data: bytes, after: Cursor) -> list[Delta]:
        """The deltas in ``data`` (read at the mark) past ``after``; the mark moves past its
        last complete line (a line without its newline is a write in progress)."""
        end = data.rfind(b"\n") + 1
        out: list[Delta] = []
        final: Cursor | None = None
        for line in data[:end].split(b"\n")[:-1]:
            try:
                delta = Delta.model_validate_json(line)
            except ValidationError:
                continue  # a torn line: the reader's seq check sees the hole it leaves
            cursor = (delta.attempt, delta.seq)
            mark.highest = max(mark.highest, cursor)
            if delta.final:
                final = cursor
            if cursor > after:
                out.append(delta)
        mark.offset += end
        self._read_to.move_to_end(path)
        if final is not None and final == mark.highest:
            # the reply is complete (its reader reads no more): its file is not kept open, so
            # a session deleted by another process leaves none of its text behind a descriptor
            self._forget(path)
        if len(out) > 1:
            out.sort(key=lambda d: (d.attempt, d.seq))
        return out

    def _forget(self, path: str) -> None:
        mark = self._read_to.pop(path, None)
        if mark is not None:
            os.close(mark.fd)

    async def clear(self, key: DeltaKey) -> None:
        path = self.path(key)
        self._forget(str(path))
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when empty: another reply may be streaming

    def drop_session(self, session_id: str) -> None:
        """Every side file of a deleted session, and its directory."""
        directory = self.directory(session_id)
        for path in [p for p in self._read_to if os.path.dirname(p) == str(directory)]:
            self._forget(path)
        self._remove(directory, older_than=None)

    def sweep(self) -> None:
        """Remove the side files a worker never cleared (module doc): those of sessions that no
        longer exist, and those nobody wrote to for ``ttl`` seconds."""
        try:
            entries = list(os.scandir(self._root))
        except FileNotFoundError:
            return
        expired = time.time() - self._ttl
        for entry in entries:
            if not entry.name.endswith(_SUFFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                session_file = self._root / f"{validate_session_id(entry.name[:-5])}.jsonl"
            except InvalidSessionIdError:
                continue  # not a directory of ours
            orphan = not session_file.exists()
            self._remove(Path(entry.path), older_than=None if orphan else expired)

    @staticmethod
    def _remove(directory: Path, *, older_than: float | None) -> None:
        """Remove the files of ``directory`` (only those last written before ``older_than``,
        if given), then the directory if that left it empty; a file or directory that went
        meanwhile is no error."""
        try:
            files = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        for file in files:
            with contextlib.suppress(FileNotFoundError):
                if older_than is None or file.stat(follow_symlinks=False).st_mtime < older_than:
                    os.unlink(file.path)
        with contextlib.suppress(OSError):
            directory.rmdir()  # only when empty: a reply may be streaming into it

    def size(self, session_id: str) -> int:
        """Bytes of side files held for ``session_id`` (the bench's bound check)."""
        directory = self.directory(session_id)
        if not directory.exists():
            return 0
        return sum(p.stat().st_size for p in directory.iterdir())
