"""The line codec of a FileStore session file (the tables of SPEC §2.2).

Line 1 is the ``session_init`` header; every later line is one ``encode_entry`` object plus
``\\n``. These functions decide what each line means (an entry, blank, torn, or damage to report)
and are shared by load and by append's torn-tail repair and ID scan, so both read a file alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from ..ai.timefmt import format_time, parse_time
from ..session.codec import bulk_decoding, decode_entry, encode_entry, wire_to_entry
from ..session.entries import Entry
from ..session.errors import CorruptSessionError, EntryDecodeError
from ..session.record import SessionRecord
from .file_prefix import is_json_prefix, utf8_prefix

__all__ = [
    "HeaderProblem",
    "Tail",
    "classify_tail",
    "corrupt_line",
    "decode_line",
    "decode_lines",
    "decode_text",
    "header_bytes",
    "header_tail",
    "line_id",
    "parse_header",
    "read_lines",
    "repeated_id",
]


class HeaderProblem(Exception):
    """Line 1 is missing or not this session's header (maybe only because a create is running)."""


@dataclass(frozen=True)
class Tail:
    """An unterminated final line: keep its first ``keep`` bytes as a line, or drop it (0)."""

    offset: int
    keep: int
    entry: Entry | None = None


def decode_text(body: bytes) -> str:
    return body.decode("utf-8")


def parse_header(body: bytes, session_id: str) -> SessionRecord:
    """The record in header line ``body`` (no ``\\n``); ``HeaderProblem`` if it is not one."""
    try:
        data = json.loads(decode_text(body))
    except (ValueError, RecursionError) as exc:
        raise HeaderProblem(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("type") != "session_init":
        raise HeaderProblem("line 1 is not a session_init object")
    if data.get("id") != session_id:
        raise HeaderProblem(f"header id {data.get('id')!r} is not {session_id!r}")
    parent = data.get("parent_id") or None
    created = data.get("created_at")
    if (parent is not None and not isinstance(parent, str)) or not isinstance(created, str):
        raise HeaderProblem("bad parent_id or created_at")
    try:
        created_at = parse_time(created)
    except ValueError as exc:
        raise HeaderProblem(str(exc)) from None
    return SessionRecord(id=session_id, parent_id=parent, created_at=created_at)


def corrupt_line(session_id: str, lineno: int, exc: Exception) -> CorruptSessionError:
    if isinstance(exc, RecursionError):
        return CorruptSessionError(session_id, "decode entry: JSON nested too deep", line=lineno)
    return CorruptSessionError(session_id, f"decode entry: {exc}", line=lineno)


def repeated_id(session_id: str, entry_id: str, first: int, lineno: int) -> CorruptSessionError:
    """A later line repeats an entry ID with other content (identical repeats are skipped)."""
    return CorruptSessionError(
        session_id,
        f"decode entry: entry {entry_id!r} repeats line {first} with other content",
        line=lineno,
    )


def decode_line(body: bytes, session_id: str, lineno: int) -> Entry | None:
    """The entry on a complete line; ``None`` for a blank one; CorruptSessionError otherwise."""
    try:
        text = decode_text(body)
        if not text.strip():
            return None
        return decode_entry(text)
    except (UnicodeDecodeError, EntryDecodeError) as exc:
        raise corrupt_line(session_id, lineno, exc) from exc


def line_id(body: bytes, session_id: str, lineno: int) -> str | None:
    """The entry ID on a complete line, for the append index; JSON-parsed only, not validated."""
    try:
        text = decode_text(body)
        if not text.strip():
            return None
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise corrupt_line(session_id, lineno, exc) from exc
    entry_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(entry_id, str) or not entry_id:
        raise CorruptSessionError(session_id, "decode entry: no entry id", line=lineno)
    return entry_id


def classify_tail(raw: bytes, offset: int, session_id: str, lineno: int) -> Tail:
    """Decide an unterminated final entry line: blank or torn → drop; complete → keep; else corrupt.

    Trailing NULs are ignored (file systems pad a crashed extension with zeros), so a complete entry
    followed by NULs is kept and a partial one followed by NULs is torn.
    """
    try:
        blank = not decode_text(raw).strip()
    except UnicodeDecodeError:
        blank = False
    if blank:
        return Tail(offset, keep=0)
    body = raw.rstrip(b"\x00")
    try:
        data = json.loads(decode_text(body))
    except (ValueError, RecursionError):  # nested too deep for json counts as not complete
        text = utf8_prefix(body)
        if text is not None and is_json_prefix(text):
            return Tail(offset, keep=0)
        raise CorruptSessionError(
            session_id, "decode entry: unterminated last line is not JSON", line=lineno
        ) from None
    try:
        entry = wire_to_entry(data)
    except EntryDecodeError as exc:
        raise corrupt_line(session_id, lineno, exc) from exc
    return Tail(offset, keep=len(body), entry=entry)


def header_tail(raw: bytes, session_id: str) -> Tail:
    """An unterminated header line (the file's only line): keep it if complete, else it is torn."""
    body = raw.rstrip(b"\x00")
    parse_header(body, session_id)
    return Tail(0, keep=len(body))


def read_lines(f: IO[bytes], offset: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, raw line)`` from ``offset`` on, any length; the last may be unterminated."""
    f.seek(offset)
    for raw in f:
        yield offset, raw
        offset += len(raw)


def header_bytes(session_id: str, parent_id: str | None, created_at: datetime) -> bytes:
    data: dict[str, str] = {"type": "session_init", "id": session_id}
    if parent_id:
        data["parent_id"] = parent_id
    data["created_at"] = format_time(created_at)
    return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _same_as_kept(entries: list[Entry], repeat: Entry) -> bool:
    """Whether ``repeat`` encodes exactly as the kept entry of its ID (first wins, as appends do).

    Linear, but only reached for a repeated ID, which only hand-editing produces.
    """
    kept = next(e for e in entries if e.id == repeat.id)
    return encode_entry(kept) == encode_entry(repeat)


def decode_lines(lines: list[tuple[int, bytes]], session_id: str) -> list[Entry]:
    """Every entry of a session file's ``(offset, line)`` list, applying the tables of SPEC §2.2."""
    with bulk_decoding():
        return _decode_all(lines, session_id)


def _decode_all(lines: list[tuple[int, bytes]], session_id: str) -> list[Entry]:
    entries: list[Entry] = []
    seen: dict[str, int] = {}  # entry ID -> its line, to catch a hand-copied repeat
    lineno = 0
    for offset, raw in lines:
        lineno += 1
        terminated = raw.endswith(b"\n")
        if lineno == 1:
            body = raw[:-1] if terminated else raw.rstrip(b"\x00")
            parse_header(body, session_id)
            continue
        if terminated:
            entry = decode_line(raw[:-1], session_id, lineno)
        else:
            entry = classify_tail(raw, offset, session_id, lineno).entry
        if entry is None:
            continue
        first = seen.setdefault(entry.id, lineno)
        if first == lineno:
            entries.append(entry)
        elif not _same_as_kept(entries, entry):
            raise repeated_id(session_id, entry.id, first, lineno)
    if lineno == 0:
        raise HeaderProblem("empty file")
    return entries
