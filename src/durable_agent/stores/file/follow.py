"""Reading a FileStore session from a sequence number on (``FileStore.load_entries_after``).

A follower asks the same session "what is after seq N?" every few hundred milliseconds while a
run streams (docs/design.md#receipts), so that question must not cost a read of the whole file.
The store keeps a **mark** per recently followed file: how far it has read (the end of the last
complete line), the byte offset of every entry's line by seq, and each entry ID's first line (a
hand-copied repeat of a line is skipped exactly as ``load_entries`` skips it). A read then starts
at the line of seq N + 1 and decodes only what follows; a read with nothing new is one ``stat``.

A store object with no mark yet (a fresh server process resuming a client deep into a long
session) counts the lines before seq N + 1 without parsing them when all are as the codec writes
them (:func:`_skip`): it finds the line in large chunks with ``bytes.count``, checks each line's
start and that no ID repeats in one regex pass, and keeps only the count and the set of those
IDs, not a Python object per line. Otherwise it counts line by line. A later read before the
counted seqs starts over, as a cold read does. A read of the last entry (:func:`read_last`)
brings the mark to the file's end so, and decodes that entry's line alone.

A mark is trusted only for the same file: same device and inode, the header line it read still
there, no shorter than the mark's end and a line boundary at that end. A session deleted and
created again (even on a reused inode) fails the header check, a torn tail cut off by the next
append lies past the end (only complete lines are ever counted), and anything else makes the
read start over from the header, as a cold read does. A mark lives in the store object's memory
only: nothing of it is written, so nothing outlives a deleted session.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ...session.codec import bulk_decoding
from ...session.entries import Entry
from ...session.errors import SessionNotFoundError
from .index import Recent, reencode_line
from .io import posix_locks
from .lines import (
    HeaderProblem,
    classify_tail,
    decode_line,
    header_tail,
    line_id,
    parse_header,
    read_lines,
    repeated_id,
)

__all__ = ["INLINE_BYTES", "Mark", "Marks", "read_after", "read_last", "read_now"]

_SHAPED = re.compile(rb'\n\{"type":"[a-z_]+","id":"([^"\\\n]+)"')
"""A line break and the start of an entry line as the codec writes it (type, then an ID with
nothing escaped); the literal start lets the regex engine skip ahead."""

_SKIP_LIMIT = 64 << 20
"""The largest file a cold read scans at once (:func:`_skip`); a longer one counts line by line."""

_LINE_COST = 6
"""About how many lines a scan (:func:`_skip`, from the header) counts in the time one line is
counted by its JSON: a mark far behind the seq asked for is replaced by a scan, one close to it
reads on line by line."""

_CHUNK = 1 << 16
"""Bytes :func:`_line_end` counts line breaks in at a time."""


@dataclass
class Mark:
    """What a read of one session file established, up to ``end`` (just after a ``\\n``)."""

    file_key: tuple[int, int]
    header: bytes = b""
    end: int = 0
    lines: int = 0
    counted: int = 0
    """Seqs ``1..counted`` were counted by :func:`_skip`: one line each, right after the header,
    their offsets not kept (a read before them starts over)."""
    counted_ids: set[bytes] = field(default_factory=set)
    """The IDs of those lines as stored (UTF-8, nothing escaped), each on its first line."""
    offsets: list[int] = field(default_factory=list)
    """``offsets[s - 1 - counted]``: the offset of the line holding the entry of seq ``s``."""
    first: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Entry ID -> (offset, line number) of the line that first holds it (past the counted)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held while a read extends the mark (reads run in worker threads)."""

    @property
    def seq(self) -> int:
        return self.counted + len(self.offsets)

    def holds(self, entry_id: str) -> bool:
        """Whether a line before ``end`` holds ``entry_id``."""
        return entry_id in self.first or _raw(entry_id) in self.counted_ids

    def fits(self, fd: int, file_key: tuple[int, int], size: int) -> bool:
        if self.file_key != file_key or self.end == 0 or self.end > size:
            return False
        head = os.pread(fd, len(self.header), 0)
        return head == self.header and os.pread(fd, 1, self.end - 1) == b"\n"


def _raw(entry_id: str) -> bytes:
    """``entry_id`` as a line stores it unescaped (a lone surrogate matches no stored ID)."""
    return entry_id.encode("utf-8", "surrogatepass")


class Marks(Recent[Mark]):
    """The marks of the most recently followed files."""

    def replaces(self, old: Mark, new: Mark) -> bool:
        """A mark of the same file only moves forward: a read that finishes after a later one
        does not take it back."""
        return old.file_key != new.file_key or old.end <= new.end

    def unchanged(self, path: Path, after: int) -> bool:
        """Whether a read after ``after`` would find nothing: the mark covers ``after`` and the
        file has not grown past it. One ``stat``, no read: what an idle follower costs.

        A read in a worker thread may extend the mark meanwhile, so ``end`` is taken first: a
        line's seq is counted before the end moves past it, so the seq read next covers at least
        every entry before that ``end``. (Taken the other way round, a file ending at the new end
        would pass for one ending at the old seq, hiding the entries in between.)"""
        mark = self.get(path)
        if mark is None:
            return False
        end = mark.end
        if after < mark.seq:
            return False
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False  # the read says SessionNotFoundError
        return (st.st_dev, st.st_ino) == mark.file_key and st.st_size == end


INLINE_BYTES = 64 << 10
"""Bytes past its mark a follower's read may find and still run on the caller's thread."""


def read_now(
    path: Path, session_id: str, after: int, marks: Marks, limit: int | None = None
) -> list[tuple[int, Entry]] | None:
    """A follower's read done here, on the event loop, or ``None`` (read in a thread then).
    With nothing new it is one ``stat``; when the mark covers ``after``, the file grew past it by
    at most ``INLINE_BYTES`` and no append holds its lock, a few small ``pread``s that decode a
    reply or two. A thread hop would cost the client more (a wake-up of its loop) than that."""
    if marks.unchanged(path, after):
        return []
    mark = marks.get(path)
    if mark is None or after < mark.seq or (after - mark.seq) * _LINE_COST > after:
        return None  # a read that would start over or scan: in a thread
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None  # the thread's read says SessionNotFoundError
    fcntl = posix_locks()
    try:
        st = os.fstat(f.fileno())
        if st.st_size - mark.end > INLINE_BYTES or not mark.fits(
            f.fileno(), (st.st_dev, st.st_ino), st.st_size
        ):
            return None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # an append is writing: wait for it in a thread
        try:
            return read_after(f, session_id, after, marks, path, limit)
        except HeaderProblem:
            return None  # the thread's read waits for a create and reads again
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    finally:
        f.close()


def read_after(
    f: IO[bytes], session_id: str, after: int, marks: Marks, path: Path, limit: int | None = None
) -> list[tuple[int, Entry]]:
    """The entries of the (shared-locked) open file ``f`` after seq ``after``, with their seqs;
    at most ``limit``, read no further than their lines (a page of a long session)."""
    mark = _start(f, session_id, marks, path, after)
    with mark.lock:
        out: list[tuple[int, Entry]] = []
        if after < mark.seq:
            start = mark.offsets[after - mark.counted]
            stop = mark.seq if limit is None else min(after + limit, mark.seq)
            end = mark.end if stop == mark.seq else mark.offsets[stop - mark.counted]
            out = _decode(f, session_id, mark, start, end, after)
        if limit is None or len(out) < limit:
            with bulk_decoding():
                out += _extend(
                    f, session_id, mark, after, None if limit is None else limit - len(out)
                )
    marks.put(path, mark)
    return out


def read_last(f: IO[bytes], session_id: str, marks: Marks, path: Path) -> tuple[int, Entry] | None:
    """The last entry of the (shared-locked) open file ``f`` with its seq (``None``: none): the
    mark is brought to the end of the complete lines counting them (:func:`_skip` on a cold
    read, else each line's ID), then one line is decoded; an unterminated last one counts, or
    not, as a load decides (a complete entry counts, a torn one does not)."""
    mark = _start(f, session_id, marks, path, None)
    with mark.lock:
        _extend(f, session_id, mark, sys.maxsize, None)
        found = _extend(f, session_id, mark, mark.seq, None)  # an unterminated last entry
        if not found and mark.seq:  # the mark keeps the line of its last seq
            found = _decode(f, session_id, mark, mark.offsets[-1], mark.end, mark.seq - 1)
    marks.put(path, mark)
    return found[-1] if found else None


def _start(f: IO[bytes], session_id: str, marks: Marks, path: Path, after: int | None) -> Mark:
    """The mark a read after seq ``after`` (``None``: to the file's end) goes on from: the
    file's own if it fits, one :func:`_skip` counted if that is cheaper, else a new one."""
    fd = f.fileno()
    st = os.fstat(fd)
    if st.st_nlink == 0:  # deleted while this waited for the lock
        raise SessionNotFoundError(session_id)
    file_key = (st.st_dev, st.st_ino)
    mark = marks.get(path)
    fits = mark is not None and mark.fits(fd, file_key, st.st_size)
    if mark is None or not fits or (after is not None and after < mark.counted):
        mark = Mark(file_key)
    far = mark.end == 0 if after is None else (after - mark.seq) * _LINE_COST > after
    counted = Mark(file_key)
    return counted if far and _skip(f, session_id, counted, after, st.st_size) else mark


def _skip(f: IO[bytes], session_id: str, mark: Mark, after: int | None, size: int) -> bool:
    """Count the first ``after`` entry lines (``None``: every complete one) into the empty
    ``mark`` without parsing them, when every one starts as the codec writes it and no ID
    repeats: line breaks counted in large chunks, one regex pass for the lines' starts, no Python
    object per line but each ID (a resume deep into a long session costs a small fraction of a
    load); the last line's offset is kept, as a read keeps it (a last-entry read decodes that
    line alone). Anything else (blank lines, repeats, escaped IDs, hand-spaced lines) answers
    ``False`` for the line-by-line count."""
    if size > _SKIP_LIMIT:
        return False
    f.seek(0)
    data = f.read(size)
    base = data.find(b"\n") + 1  # where the first entry line starts
    if base == 0:
        return False
    parse_header(data[: base - 1], session_id)
    after = data.count(b"\n", base) if after is None else after
    end = _line_end(data, base, after)
    if end < 0:
        return False  # fewer complete lines than that
    ids = _SHAPED.findall(data, base - 1, end - 1)
    unique = set(ids)
    if len(ids) != after or len(unique) != after:
        return False  # a line among them is not in the codec's shape, or an ID repeats
    try:
        b"\n".join(ids).decode("utf-8")
    except UnicodeDecodeError:
        return False
    mark.header, mark.end, mark.lines = data[:base], end, after + 1
    mark.counted, mark.counted_ids = after, unique
    if after:
        start = data.rfind(b"\n", 0, end - 1) + 1
        mark.counted, mark.offsets = after - 1, [start]
        mark.first[ids[-1].decode("utf-8")] = (start, after + 1)
        unique.discard(ids[-1])
    return True


def _line_end(data: bytes, start: int, n: int) -> int:
    """Just past the ``n``-th line break at or after ``start``, ``-1`` if there are fewer: whole
    chunks are counted in C, then the chunk holding it is halved down to a few lines."""
    lo = start
    while True:
        hi = min(lo + _CHUNK, len(data))
        found = data.count(b"\n", lo, hi)
        if found >= n:
            break
        if hi == len(data):
            return -1
        n, lo = n - found, hi
    while hi - lo > 1024:
        mid = (lo + hi) // 2
        found = data.count(b"\n", lo, mid)
        if found >= n:
            hi = mid
        else:
            n, lo = n - found, mid
    for _ in range(n):
        lo = data.index(b"\n", lo) + 1
    return lo


def _decode(
    f: IO[bytes], session_id: str, mark: Mark, start: int, end: int, after: int
) -> list[tuple[int, Entry]]:
    """The entries the mark already counted between ``start`` and ``end`` (seq > ``after``)."""
    f.seek(start)
    data = f.read(end - start)
    known = mark.offsets[after - mark.counted :]
    seqs = {offset: seq for seq, offset in enumerate(known, after + 1)}
    out: list[tuple[int, Entry]] = []
    offset = start
    with bulk_decoding():
        for raw in data.splitlines(keepends=True):
            seq = seqs.get(offset)
            if seq is not None:
                entry = decode_line(raw[:-1], session_id, 0)
                assert entry is not None
                out.append((seq, entry))
            offset += len(raw)
    return out


def _extend(
    f: IO[bytes], session_id: str, mark: Mark, after: int, take: int | None
) -> list[tuple[int, Entry]]:
    """Read the complete lines past the mark's end, counting them into the mark; decode the
    entries of seq > ``after`` (earlier ones cost a JSON parse for their ID only), stopping
    after ``take`` of them (the mark then ends there)."""
    out: list[tuple[int, Entry]] = []
    for offset, raw in read_lines(f, mark.end):
        lineno = mark.lines + 1
        if not raw.endswith(b"\n"):
            _tail(raw, offset, session_id, mark, lineno, after, out)
            break
        body = raw[:-1]
        if lineno == 1:
            parse_header(body, session_id)
            mark.header = raw
        elif after >= mark.seq + 1:
            entry_id = line_id(body, session_id, lineno)
            if entry_id is not None and _first(f, session_id, mark, entry_id, offset, lineno):
                mark.offsets.append(offset)
        else:
            entry = decode_line(body, session_id, lineno)
            if entry is not None and _first(f, session_id, mark, entry.id, offset, lineno):
                mark.offsets.append(offset)
                out.append((mark.seq, entry))
        mark.end, mark.lines = offset + len(raw), lineno
        if len(out) == take:
            break
    if mark.lines == 0:
        raise HeaderProblem("empty file")
    return out


def _tail(
    raw: bytes,
    offset: int,
    session_id: str,
    mark: Mark,
    lineno: int,
    after: int,
    out: list[tuple[int, Entry]],
) -> None:
    """An unterminated last line: a complete entry counts (as a load keeps it) without moving
    the mark past it; a torn one is left for its writer's next append to cut off."""
    if lineno == 1:
        header_tail(raw, session_id)
        return
    entry = classify_tail(raw, offset, session_id, lineno).entry
    if entry is None or mark.holds(entry.id):
        return
    seq = mark.seq + 1
    if seq > after:
        out.append((seq, entry))


def _first(
    f: IO[bytes], session_id: str, mark: Mark, entry_id: str, offset: int, lineno: int
) -> bool:
    """Whether the line at ``offset`` is ``entry_id``'s first (a repeat must encode the same,
    as ``load_entries`` requires, and is then skipped)."""
    known = mark.first.get(entry_id)
    if known is None and mark.counted_ids and _raw(entry_id) in mark.counted_ids:
        known = mark.first[entry_id] = _counted_line(f.fileno(), mark, entry_id)
    if known is None:
        mark.first[entry_id] = (offset, lineno)
        return True
    if known[0] == offset:
        return True
    fd = f.fileno()
    first = reencode_line(fd, known[0])
    if first is None or first != reencode_line(fd, offset):
        raise repeated_id(session_id, entry_id, known[1], lineno)
    return False


def _counted_line(fd: int, mark: Mark, entry_id: str) -> tuple[int, int]:
    """(offset, line number) of the counted line holding ``entry_id``: looked up only when a
    later line repeats it (a hand-copied line), so a cold read keeps no offset per line."""
    data = os.pread(fd, mark.end, 0)
    pattern = rb'\n\{"type":"[a-z_]+","id":"' + re.escape(_raw(entry_id)) + rb'"'
    found = re.compile(pattern).search(data, len(mark.header) - 1)
    assert found is not None, "a counted ID is on a counted line"
    start = found.start() + 1
    return start, data.count(b"\n", 0, start) + 1
