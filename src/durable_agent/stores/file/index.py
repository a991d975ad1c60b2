"""The append-side ID index of FileStore, cached per path and keyed by file identity and size.

Idempotency (docs/design.md#store-contract) needs the stored IDs of a session before every
append. Reading the whole file each time would make appends O(session length), so a store keeps,
per file, the IDs and line digests up to a known offset and reads only what was appended since
(by anyone). A file is known by its identity (device, inode) and its header line: a session
deleted and created again by another store object may get the freed inode back, but never the
same header (it holds the creation time).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Generic, TypeVar

from ...session.codec import decode_entry, encode_entry
from ...session.entries import Entry
from ...session.errors import EntryDecodeError
from .lines import (
    HeaderProblem,
    Tail,
    classify_tail,
    decode_text,
    header_tail,
    line_id,
    parse_header,
    read_lines,
    repeated_id,
)

__all__ = [
    "stored_lookup",
    "Found",
    "Index",
    "Recent",
    "Scan",
    "covers",
    "digest",
    "header_line",
    "reencode_line",
    "scan_ids",
]


V = TypeVar("V")


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass
class Index:
    """Stored IDs of one file up to ``end`` (always just after a ``\\n``): ID → (offset, digest).

    Digests of the stored lines keep the cache small; a digest mismatch is settled by re-reading the
    stored line and comparing ``encode_entry`` outputs, as the store contract defines idempotency.
    """

    file_key: tuple[int, int]
    header: bytes = b""
    """The file's first line: with ``file_key``, what tells this file from a later one."""
    end: int = 0
    lines: int = 0
    ids: dict[str, tuple[int, bytes, int]] = field(default_factory=dict)
    """ID -> (offset, digest, line number) of the line that first holds it."""

    def add(self, fd: int, session_id: str, found: Found) -> None:
        """Index a stored line; a repeat of a stored ID must encode the same (first wins), else
        the file was edited by hand and ``CorruptSessionError`` says where, as a load would."""
        offset, line_digest, entry_id, lineno = found
        known = self.ids.setdefault(entry_id, (offset, line_digest, lineno))
        if known[0] == offset or known[1] == line_digest:
            return
        first = reencode_line(fd, known[0])
        if first is None or first != reencode_line(fd, offset):
            raise repeated_id(session_id, entry_id, known[2], lineno)


Found = tuple[int, bytes, str, int]
"""A stored line: its offset, digest, entry ID and line number."""


@dataclass
class Scan:
    """What reading a range of a session file found."""

    end: int
    lines: int
    found: list[Found] = field(default_factory=list)
    tail: Tail | None = None


def scan_ids(f: IO[bytes], session_id: str, offset: int, lineno: int) -> Scan:
    """IDs of the complete lines from ``offset`` on (line ``offset`` numbered ``lineno + 1``)."""
    scan = Scan(end=offset, lines=lineno)
    for start, raw in read_lines(f, offset):
        lineno += 1
        if not raw.endswith(b"\n"):
            if lineno == 1:
                scan.tail = header_tail(raw, session_id)
            else:
                scan.tail = classify_tail(raw, start, session_id, lineno)
            break
        body = raw[:-1]
        if lineno == 1:
            parse_header(body, session_id)
        else:
            entry_id = line_id(body, session_id, lineno)
            if entry_id is not None:
                scan.found.append((start, digest(body), entry_id, lineno))
        scan.end, scan.lines = start + len(raw), lineno
    if lineno == 0:
        raise HeaderProblem("empty file")
    return scan


def header_line(fd: int) -> bytes:
    """The file's first line with its ``\n`` (a header is far below 1 KiB), or ``b""``."""
    head = os.pread(fd, 1024, 0)
    cut = head.find(b"\n")
    return head[: cut + 1] if cut >= 0 else b""


def covers(fd: int, index: Index, file_key: tuple[int, int], size: int) -> bool:
    """Whether a cached index still describes the start of this file: same file (identity and
    header line), not shrunk below it, and a line boundary where it ends (the file only grows,
    torn-tail repair excepted)."""
    if index.file_key != file_key or index.end > size or index.end == 0 or not index.header:
        return False
    if os.pread(fd, 1, index.end - 1) != b"\n":
        return False
    return header_line(fd) == index.header


def reencode_line(fd: int, offset: int) -> str | None:
    """``encode_entry`` of the entry stored at ``offset`` (so an older codec's bytes compare by
    content), or ``None`` if that line no longer decodes."""
    with open(fd, "rb", closefd=False) as f:
        f.seek(offset)
        raw = f.readline()
    try:
        return encode_entry(decode_entry(decode_text(raw.rstrip(b"\n"))))
    except (UnicodeDecodeError, EntryDecodeError):
        return None


class Recent(Generic[V]):
    """A value per file for the most recently used files, least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Path, V] = OrderedDict()
        self._lock = threading.Lock()  # blocking I/O (and so this cache) runs in worker threads

    def get(self, path: Path) -> V | None:
        with self._lock:
            value = self._items.get(path)
            if value is not None:
                self._items.move_to_end(path)
            return value

    def forget(self, path: Path) -> None:
        with self._lock:
            self._items.pop(path, None)

    def put(self, path: Path, value: V) -> None:
        with self._lock:
            old = self._items.get(path)
            if old is None or self.replaces(old, value):
                self._items[path] = value
            self._items.move_to_end(path)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def replaces(self, old: V, new: V) -> bool:
        """Whether ``new`` takes the place of ``old`` in :meth:`put` (here: always)."""
        return True


_CONFLICT = "\x00stored entry differs"
"""What ``plan_append`` sees for a stored ID whose encoding differs: never equal to a wire."""


def stored_lookup(
    fd: int, index: Index, batch: list[tuple[Entry, str]]
) -> Callable[[str], str | None]:
    """``plan_append``'s view of the stored encodings, from digests, exact on a mismatch."""
    first = {entry.id: wire for entry, wire in reversed(batch)}  # an ID's first wire wins

    def stored(entry_id: str) -> str | None:
        known = index.ids.get(entry_id)
        if known is None:
            return None
        wire = first[entry_id]
        if digest(wire.encode("utf-8")) == known[1]:
            return wire
        return reencode_line(fd, known[0]) or _CONFLICT

    return stored
