"""FileStore: one append-only JSON Lines file per session (SPEC §2.2).

``<root>/<session_id>.jsonl`` starts with a ``session_init`` header line; every later line is
one ``encode_entry`` object plus ``\\n``. The format is chosen so that a crash at any moment
leaves a file that still loads: a write is one ``write`` call of whole lines, a torn final line
(a strict prefix of JSON, possibly padded with NULs by the file system) is dropped on load and
truncated before the next append, while a damaged *complete* line is reported rather than
silently skipped.

Concurrency: every append takes an exclusive ``flock`` on the session file and every load a shared
one, so store objects and processes on one host can share ``root``. ``create_session`` additionally
holds an exclusive ``flock`` on the root directory while it writes the header; a reader that finds a
missing or torn header waits on that lock once and looks again, so it never mistakes a session being
created for a corrupt one. All blocking I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import codecs
import fcntl
import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

from ..ai.timefmt import format_time, parse_time, utc_now
from ..session.appendplan import encode_batch, plan_append
from ..session.codec import bulk_decoding, decode_entry, encode_entry, wire_to_entry
from ..session.entries import Entry
from ..session.errors import (
    CorruptSessionError,
    EntryDecodeError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ..session.ids import validate_session_id
from ..session.record import SessionRecord
from .memory import DEFAULT_MAX_ENTRY_BYTES, check_parent_id

__all__ = ["FileStore"]

T = TypeVar("T")

_DIR_MODE = 0o755
_FILE_MODE = 0o644
_INDEX_CACHE_SIZE = 256
_CONFLICT = "\x00stored entry differs"
"""What ``plan_append`` sees for a stored ID whose encoding differs: never equal to a wire."""


# --------------------------------------------------------------------------------------------------
# Torn-tail detection: is an unterminated final line a strict prefix of some JSON value?
# --------------------------------------------------------------------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_STRING_BODY = r'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+'
_STRING = re.compile(_STRING_BODY + '"')
_STRING_PREFIX = re.compile(_STRING_BODY + r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*|(?:\.[0-9]+)?[eE][+-]?[0-9]*)?)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")  # as Python's json reads
_CLOSER = {"{": "}", "[": "]"}

# What the scanner expects next.
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE, _DONE = range(7)


def _after_value(stack: list[str]) -> int:
    return _DONE if not stack else _COMMA_OR_CLOSE


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match is not None else pos


def _scan_scalar(text: str, pos: int) -> int | None:
    """End of the string, number or literal at ``pos``; -1 if it runs validly into the end of
    ``text`` (so more input could complete it); ``None`` if it is invalid."""
    c = text[pos]
    if c == '"':
        m = _STRING.match(text, pos)
        if m is not None:
            return m.end()
        return -1 if _STRING_PREFIX.fullmatch(text, pos) else None
    left = len(text) - pos
    for literal in _LITERALS:
        if text.startswith(literal, pos):
            return pos + len(literal)
        if left < len(literal) and literal.startswith(text[pos:]):
            return -1
    if c == "-" or "0" <= c <= "9":
        if _NUMBER_PREFIX.fullmatch(text, pos):
            return -1
        m = _NUMBER.match(text, pos)
        return m.end() if m is not None else None
    return None


def is_json_prefix(text: str) -> bool:
    """True if ``text`` is a strict prefix of a JSON value: what a torn write of one leaves behind.

    A complete value, trailing data after one, or anything no continuation could make valid is
    not a prefix. The empty string (or only whitespace) is a prefix. Runs in linear time: string
    bodies are skipped by possessive regexes, so a 512 KiB torn line is cheap to classify.
    """
    stack: list[str] = []
    expect = _VALUE
    pos, n = 0, len(text)
    while True:
        pos = _skip_ws(text, pos)
        if pos == n:
            return expect != _DONE
        c = text[pos]
        if expect == _DONE:
            return False
        if expect == _COLON:
            if c != ":":
                return False
            pos, expect = pos + 1, _VALUE
            continue
        closes = expect in (_VALUE_OR_CLOSE, _KEY_OR_CLOSE, _COMMA_OR_CLOSE)
        if closes and stack and c == _CLOSER[stack[-1]]:
            stack.pop()
            pos, expect = pos + 1, _after_value(stack)
            continue
        if expect == _COMMA_OR_CLOSE:
            if c != ",":
                return False
            pos, expect = pos + 1, (_KEY if stack[-1] == "{" else _VALUE)
            continue
        if expect in (_KEY, _KEY_OR_CLOSE) and c != '"':
            return False
        if c in _CLOSER:
            stack.append(c)
            pos, expect = pos + 1, (_KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE)
            continue
        end = _scan_scalar(text, pos)
        if end is None:
            return False
        if end == -1:
            return True
        is_key = expect in (_KEY, _KEY_OR_CLOSE)
        pos, expect = end, (_COLON if is_key else _after_value(stack))


def _utf8_prefix(data: bytes) -> str | None:
    """Decode ``data`` that may end in the middle of a UTF-8 sequence; ``None`` if it is invalid.

    A cut multi-byte character is replaced by a stand-in non-ASCII letter, which keeps the JSON
    prefix question honest: non-ASCII text is only valid inside a string.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    pending, _ = decoder.getstate()
    return text + "\u00e9" if pending else text


# --------------------------------------------------------------------------------------------------
# Line outcomes (the tables of SPEC §2.2), shared by load and by append's repair and ID scan.
# --------------------------------------------------------------------------------------------------


class _HeaderProblem(Exception):
    """Line 1 is missing or not this session's header (maybe only because a create is running)."""


@dataclass(frozen=True)
class _Tail:
    """An unterminated final line: keep its first ``keep`` bytes as a line, or drop it (0)."""

    offset: int
    keep: int
    entry: Entry | None = None


def _decode_text(body: bytes) -> str:
    return body.decode("utf-8")


def _parse_header(body: bytes, session_id: str) -> SessionRecord:
    """The record in header line ``body`` (no ``\\n``); ``_HeaderProblem`` if it is not one."""
    try:
        data = json.loads(_decode_text(body))
    except ValueError as exc:
        raise _HeaderProblem(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("type") != "session_init":
        raise _HeaderProblem("line 1 is not a session_init object")
    if data.get("id") != session_id:
        raise _HeaderProblem(f"header id {data.get('id')!r} is not {session_id!r}")
    parent = data.get("parent_id") or None
    created = data.get("created_at")
    if (parent is not None and not isinstance(parent, str)) or not isinstance(created, str):
        raise _HeaderProblem("bad parent_id or created_at")
    try:
        created_at = parse_time(created)
    except ValueError as exc:
        raise _HeaderProblem(str(exc)) from None
    return SessionRecord(id=session_id, parent_id=parent, created_at=created_at)


def _corrupt_line(session_id: str, lineno: int, exc: Exception) -> CorruptSessionError:
    return CorruptSessionError(session_id, f"decode entry: {exc}", line=lineno)


def _decode_line(body: bytes, session_id: str, lineno: int) -> Entry | None:
    """The entry on a complete line; ``None`` for a blank one; CorruptSessionError otherwise."""
    try:
        text = _decode_text(body)
        if not text.strip():
            return None
        return decode_entry(text)
    except (UnicodeDecodeError, EntryDecodeError) as exc:
        raise _corrupt_line(session_id, lineno, exc) from exc


def _line_id(body: bytes, session_id: str, lineno: int) -> str | None:
    """The entry ID on a complete line, for the append index; JSON-parsed only, not validated."""
    try:
        text = _decode_text(body)
        if not text.strip():
            return None
        data = json.loads(text)
    except ValueError as exc:
        raise _corrupt_line(session_id, lineno, exc) from exc
    entry_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(entry_id, str) or not entry_id:
        raise CorruptSessionError(session_id, "decode entry: no entry id", line=lineno)
    return entry_id


def _classify_tail(raw: bytes, offset: int, session_id: str, lineno: int) -> _Tail:
    """Decide an unterminated final entry line: blank or torn → drop; complete → keep; else corrupt.

    Trailing NULs are ignored (file systems pad a crashed extension with zeros), so a complete entry
    followed by NULs is kept and a partial one followed by NULs is torn.
    """
    try:
        blank = not _decode_text(raw).strip()
    except UnicodeDecodeError:
        blank = False
    if blank:
        return _Tail(offset, keep=0)
    body = raw.rstrip(b"\x00")
    try:
        data = json.loads(_decode_text(body))
    except ValueError:
        text = _utf8_prefix(body)
        if text is not None and is_json_prefix(text):
            return _Tail(offset, keep=0)
        raise CorruptSessionError(
            session_id, "decode entry: unterminated last line is not JSON", line=lineno
        ) from None
    try:
        entry = wire_to_entry(data)
    except EntryDecodeError as exc:
        raise _corrupt_line(session_id, lineno, exc) from exc
    return _Tail(offset, keep=len(body), entry=entry)


def _header_tail(raw: bytes, session_id: str) -> _Tail:
    """An unterminated header line (the file's only line): keep it if complete, else it is torn."""
    body = raw.rstrip(b"\x00")
    _parse_header(body, session_id)
    return _Tail(0, keep=len(body))


def _lines(f: IO[bytes], offset: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, raw line)`` from ``offset`` on, any length; the last may be unterminated."""
    f.seek(offset)
    for raw in f:
        yield offset, raw
        offset += len(raw)


# --------------------------------------------------------------------------------------------------
# The append-side ID index, cached per path and keyed by file identity and size.
# --------------------------------------------------------------------------------------------------


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass
class _Index:
    """Stored IDs of one file up to ``end`` (always just after a ``\\n``): ID → (offset, digest).

    Digests of the stored lines keep the cache small; a digest mismatch is settled by re-reading the
    stored line and comparing ``encode_entry`` outputs, as SPEC §2.1 defines idempotency.
    """

    file_key: tuple[int, int]
    end: int = 0
    lines: int = 0
    ids: dict[str, tuple[int, bytes]] = field(default_factory=dict)


@dataclass
class _Scan:
    """What reading a range of a session file found."""

    end: int
    lines: int
    found: list[tuple[int, bytes, str]] = field(default_factory=list)
    tail: _Tail | None = None


def _scan_ids(f: IO[bytes], session_id: str, offset: int, lineno: int) -> _Scan:
    """IDs of the complete lines from ``offset`` on (line ``offset`` numbered ``lineno + 1``)."""
    scan = _Scan(end=offset, lines=lineno)
    for start, raw in _lines(f, offset):
        lineno += 1
        if not raw.endswith(b"\n"):
            if lineno == 1:
                scan.tail = _header_tail(raw, session_id)
            else:
                scan.tail = _classify_tail(raw, start, session_id, lineno)
            break
        body = raw[:-1]
        if lineno == 1:
            _parse_header(body, session_id)
        else:
            entry_id = _line_id(body, session_id, lineno)
            if entry_id is not None:
                scan.found.append((start, _digest(body), entry_id))
        scan.end, scan.lines = start + len(raw), lineno
    if lineno == 0:
        raise _HeaderProblem("empty file")
    return scan


# --------------------------------------------------------------------------------------------------
# Small OS helpers.
# --------------------------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until done: one call in practice; a short write is continued, not dropped."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@contextmanager
def _flock(fd: int, operation: int) -> Iterator[None]:
    fcntl.flock(fd, operation)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _header_bytes(session_id: str, parent_id: str | None, created_at: datetime) -> bytes:
    data: dict[str, str] = {"type": "session_init", "id": session_id}
    if parent_id:
        data["parent_id"] = parent_id
    data["created_at"] = format_time(created_at)
    return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve a shielded write's outcome so an abandoned failure is not logged as unretrieved."""
    if not task.cancelled():
        task.exception()


async def _finish(call: Callable[[], T]) -> T:
    """Run a write in a worker thread and see it through even if the caller is cancelled.

    Cancellation before this point has no effect; after it, the write completes (the caller may
    still see ``CancelledError``) and a retry is an idempotent no-op.
    """
    task = asyncio.ensure_future(asyncio.to_thread(call))
    task.add_done_callback(_consume)
    return await asyncio.shield(task)


# --------------------------------------------------------------------------------------------------
# The store.
# --------------------------------------------------------------------------------------------------


class FileStore:
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
        self._root = Path(root)
        self._fsync = fsync
        self._max_entry_bytes = max_entry_bytes
        self._cache: OrderedDict[Path, _Index] = OrderedDict()
        self._cache_lock = threading.Lock()

    @property
    def root(self) -> Path:
        """The directory holding the session files."""
        return self._root

    def path(self, session_id: str) -> Path:
        """The file of ``session_id`` (validated first, so no ID ever escapes ``root``)."""
        return self._root / f"{validate_session_id(session_id)}.jsonl"

    # -- protocol ----------------------------------------------------------------------------------

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Create the file (``O_CREAT|O_EXCL``) with its header; ``SessionExistsError`` if taken."""
        path = self.path(session_id)
        parent = check_parent_id(parent_id)
        record = SessionRecord(id=session_id, parent_id=parent, created_at=utc_now())
        await _finish(lambda: self._guard(self._create_sync, path, record))
        return record

    async def load_session(self, session_id: str) -> SessionRecord:
        """The record from the header line; ``SessionNotFoundError`` if there is no file."""
        path = self.path(session_id)
        return await asyncio.to_thread(self._guard, self._load_session_sync, path, session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        """Every entry in append order; a torn final line is dropped, damage elsewhere raised."""
        path = self.path(session_id)
        return await asyncio.to_thread(self._guard, self._load_entries_sync, path, session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append the new entries of ``entries`` in one write; idempotent by entry ID."""
        path = self.path(session_id)
        batch = encode_batch(session_id, entries, limit=self._max_entry_bytes)
        await _finish(lambda: self._guard(self._append_sync, path, session_id, batch))

    # -- plumbing ----------------------------------------------------------------------------------

    def _guard(self, fn: Callable[..., T], *args: Any) -> T:
        """Turn any OSError not already translated into StoreUnavailableError (chained)."""
        try:
            return fn(*args)
        except OSError as exc:
            raise StoreUnavailableError(f"file store {self._root}: {exc}") from exc

    def _ensure_root(self) -> None:
        try:
            os.mkdir(self._root, _DIR_MODE)
        except FileExistsError:
            return
        except FileNotFoundError:
            os.makedirs(self._root.parent, exist_ok=True)
            try:
                os.mkdir(self._root, _DIR_MODE)
            except FileExistsError:
                return
        os.chmod(self._root, _DIR_MODE)  # mkdir's mode is filtered by the umask

    @contextmanager
    def _root_lock(self, operation: int) -> Iterator[None]:
        """The root's flock: exclusive while a header is written, shared to wait for that."""
        dirfd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with _flock(dirfd, operation):
                yield
        finally:
            os.close(dirfd)

    def _retry_after_create(self, read: Callable[[], T], session_id: str) -> T:
        """Run ``read``; on a header problem wait for any running create and read once more."""
        try:
            return read()
        except _HeaderProblem:
            pass
        with self._root_lock(fcntl.LOCK_SH):
            try:
                return read()
            except _HeaderProblem as exc:
                raise CorruptSessionError(session_id, f"decode session: {exc}", line=1) from None

    # -- create ------------------------------------------------------------------------------------

    def _create_sync(self, path: Path, record: SessionRecord) -> None:
        self._ensure_root()
        header = _header_bytes(record.id, record.parent_id, record.created_at)
        dirfd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with _flock(dirfd, fcntl.LOCK_EX):
                fd = self._create_file(path, record.id)
                try:
                    self._write_header(fd, path, header)
                finally:
                    os.close(fd)
            if self._fsync:
                os.fsync(dirfd)
        finally:
            os.close(dirfd)

    @staticmethod
    def _create_file(path: Path, session_id: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(path, flags, _FILE_MODE)
        except FileExistsError:
            raise SessionExistsError(session_id) from None

    def _write_header(self, fd: int, path: Path, header: bytes) -> None:
        """Write and sync the header; if that fails, remove the file rather than leave it empty."""
        try:
            os.fchmod(fd, _FILE_MODE)  # open's mode is filtered by the umask
            _write_all(fd, header)
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
            with _flock(f.fileno(), fcntl.LOCK_SH):
                yield f
        finally:
            f.close()

    def _load_session_sync(self, path: Path, session_id: str) -> SessionRecord:
        def read() -> SessionRecord:
            with self._open_shared(path, session_id) as f:
                raw = f.readline()  # only the header: a record never costs decoding the log
            if not raw:
                raise _HeaderProblem("empty file")
            body = raw[:-1] if raw.endswith(b"\n") else raw.rstrip(b"\x00")
            return _parse_header(body, session_id)

        return self._retry_after_create(read, session_id)

    def _load_entries_sync(self, path: Path, session_id: str) -> list[Entry]:
        def read() -> list[Entry]:
            with self._open_shared(path, session_id) as f:
                lines = list(_lines(f, 0))
            # Decoding is the slow part: do it after the lock is released, so a long load never
            # holds up appenders in other threads or processes.
            return _decode_lines(lines, session_id)

        return self._retry_after_create(read, session_id)

    # -- append ------------------------------------------------------------------------------------

    def _append_sync(self, path: Path, session_id: str, batch: list[tuple[Entry, str]]) -> None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            if batch:
                with _flock(fd, fcntl.LOCK_EX):
                    self._append_locked(fd, path, session_id, batch)
        finally:
            os.close(fd)

    def _append_locked(
        self, fd: int, path: Path, session_id: str, batch: list[tuple[Entry, str]]
    ) -> None:
        index = self._retry_after_create(
            lambda: self._current_index(fd, path, session_id), session_id
        )
        todo = plan_append(session_id, batch, self._stored_lookup(fd, session_id, index, batch))
        if not todo:
            return
        lines = [(wire + "\n").encode("utf-8") for _, wire in todo]
        _write_all(fd, b"".join(lines))
        if self._fsync:
            os.fsync(fd)
        for (entry, _), line in zip(todo, lines, strict=True):
            index.ids.setdefault(entry.id, (index.end, _digest(line[:-1])))
            index.end += len(line)
            index.lines += 1

    def _current_index(self, fd: int, path: Path, session_id: str) -> _Index:
        """The ID index of the locked file, read only past what the cache already covers; repairs
        a torn tail on the way so the file ends in ``\\n`` before anything is appended."""
        st = os.fstat(fd)
        file_key = (st.st_dev, st.st_ino)
        if st.st_size == 0:
            raise _HeaderProblem("empty file")
        index = self._cached(path)
        if index is None or not _covers(fd, index, file_key, st.st_size):
            index = _Index(file_key)
        if index.end < st.st_size:
            with open(fd, "rb", closefd=False) as f:
                scan = _scan_ids(f, session_id, index.end, index.lines)
            for offset, digest, entry_id in scan.found:
                index.ids.setdefault(entry_id, (offset, digest))
            index.end, index.lines = scan.end, scan.lines
            if scan.tail is not None:
                self._repair(fd, index, scan.tail)
        self._remember(path, index)
        return index

    def _repair(self, fd: int, index: _Index, tail: _Tail) -> None:
        """Make the file end in ``\\n``: drop a torn or blank tail, or terminate a complete one
        (cutting any NUL padding after it), and account for it in ``index``."""
        os.ftruncate(fd, tail.offset + tail.keep)
        if tail.keep:
            _write_all(fd, b"\n")
            index.lines += 1
            if tail.entry is not None:
                body = os.pread(fd, tail.keep, tail.offset)
                index.ids.setdefault(tail.entry.id, (tail.offset, _digest(body)))
        if self._fsync:
            os.fsync(fd)
        index.end = tail.offset + tail.keep + (1 if tail.keep else 0)

    def _stored_lookup(
        self, fd: int, session_id: str, index: _Index, batch: list[tuple[Entry, str]]
    ) -> Callable[[str], str | None]:
        """``plan_append``'s view of the stored encodings, from digests, exact on a mismatch."""
        first: dict[str, str] = {}
        for entry, wire in batch:
            first.setdefault(entry.id, wire)

        def stored(entry_id: str) -> str | None:
            known = index.ids.get(entry_id)
            if known is None:
                return None
            wire = first[entry_id]
            if _digest(wire.encode("utf-8")) == known[1]:
                return wire
            return _reencode_line(fd, known[0]) or _CONFLICT

        return stored

    def _cached(self, path: Path) -> _Index | None:
        with self._cache_lock:
            index = self._cache.get(path)
            if index is not None:
                self._cache.move_to_end(path)
            return index

    def _remember(self, path: Path, index: _Index) -> None:
        with self._cache_lock:
            self._cache[path] = index
            self._cache.move_to_end(path)
            while len(self._cache) > _INDEX_CACHE_SIZE:
                self._cache.popitem(last=False)


def _covers(fd: int, index: _Index, file_key: tuple[int, int], size: int) -> bool:
    """Whether a cached index still describes the start of this file: same file, not shrunk below
    it, and a line boundary where it ends (the file only grows, torn-tail repair excepted)."""
    if index.file_key != file_key or index.end > size or index.end == 0:
        return False
    return os.pread(fd, 1, index.end - 1) == b"\n"


def _reencode_line(fd: int, offset: int) -> str | None:
    """``encode_entry`` of the entry stored at ``offset`` (so an older codec's bytes compare by
    content), or ``None`` if that line no longer decodes."""
    with open(fd, "rb", closefd=False) as f:
        f.seek(offset)
        raw = f.readline()
    try:
        return encode_entry(decode_entry(_decode_text(raw.rstrip(b"\n"))))
    except (UnicodeDecodeError, EntryDecodeError):
        return None


def _decode_lines(lines: list[tuple[int, bytes]], session_id: str) -> list[Entry]:
    """Every entry of a session file's ``(offset, line)`` list, applying the tables of SPEC §2.2."""
    with bulk_decoding():
        return _decode_all(lines, session_id)


def _decode_all(lines: list[tuple[int, bytes]], session_id: str) -> list[Entry]:
    entries: list[Entry] = []
    lineno = 0
    for offset, raw in lines:
        lineno += 1
        terminated = raw.endswith(b"\n")
        if lineno == 1:
            body = raw[:-1] if terminated else raw.rstrip(b"\x00")
            _parse_header(body, session_id)
            continue
        if terminated:
            entry = _decode_line(raw[:-1], session_id, lineno)
        else:
            entry = _classify_tail(raw, offset, session_id, lineno).entry
        if entry is not None:
            entries.append(entry)
    if lineno == 0:
        raise _HeaderProblem("empty file")
    return entries
