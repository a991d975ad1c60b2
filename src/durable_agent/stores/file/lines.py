"""The line codec of a FileStore session file (docs/design.md#file-store).

Line 1 is the ``session_init`` header; every later line is one ``encode_entry`` object plus
``\\n``. These functions decide what each line means (an entry, blank, torn, or damage to report)
and are shared by load and by append's torn-tail repair and ID scan, so both read a file alike.

A crash during an append leaves at most one partial line at the end of a session file. Telling
such a torn write (drop it) from a damaged complete line (report it) needs one question answered
quickly and exactly: could more bytes still turn this text into valid JSON
(:func:`is_json_prefix`)?
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from ...ai.timefmt import format_time, parse_time
from ...session.codec import bulk_decoding, decode_entry, encode_entry, wire_to_entry
from ...session.entries import Entry
from ...session.errors import (
    CorruptSessionError,
    EntryDecodeError,
    InvalidSessionIdError,
    SessionNotFoundError,
)
from ...session.ids import validate_session_id
from ...session.store import SessionRecord

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
    "is_json_prefix",
    "list_records",
    "line_id",
    "names_another",
    "parse_header",
    "read_header",
    "read_lines",
    "repeated_id",
    "utf8_prefix",
]


logger = logging.getLogger("durable_agent.stores.file.store")  # where listing always logged


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
    """The record in header line ``body`` (no ``\\n``); ``HeaderProblem`` if it is not one, and
    ``SessionNotFoundError`` if it is the record of an ID differing only in case."""
    try:
        data = json.loads(decode_text(body))
    except (ValueError, RecursionError) as exc:
        raise HeaderProblem(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("type") != "session_init":
        raise HeaderProblem("line 1 is not a session_init object")
    named = data.get("id")
    if named != session_id:
        if isinstance(named, str) and named.casefold() == session_id.casefold():
            # a case-insensitive file system (macOS's by default) opened the file of the session
            # whose ID differs only in case: this one does not exist
            raise SessionNotFoundError(session_id)
        raise HeaderProblem(f"header id {named!r} is not {session_id!r}")
    parent = data.get("parent_id") or None
    created = data.get("created_at")
    if (parent is not None and not isinstance(parent, str)) or not isinstance(created, str):
        raise HeaderProblem("bad parent_id or created_at")
    try:
        created_at = parse_time(created)
    except ValueError as exc:
        raise HeaderProblem(str(exc)) from None
    return SessionRecord(id=session_id, parent_id=parent, created_at=created_at)


def names_another(head: bytes, session_id: str) -> bool:
    """Whether the file starting with ``head`` is another session's by its header (a
    case-insensitive file system, macOS's by default, opens ``abc.jsonl`` for ``ABC``); a
    damaged header names none."""
    try:
        data = json.loads(head.split(b"\n", 1)[0])
    except ValueError:
        return False
    named = data.get("id") if isinstance(data, dict) else None
    return isinstance(named, str) and data.get("type") == "session_init" and named != session_id


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


def read_header(f: IO[bytes], session_id: str) -> SessionRecord:
    """The record on the open file's header line (only it: a record never costs the log)."""
    raw = f.readline()
    if not raw:
        raise HeaderProblem("empty file")
    return parse_header(raw[:-1] if raw.endswith(b"\n") else raw.rstrip(b"\x00"), session_id)


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


def list_records(
    root: Path, load: Callable[[Path, str], SessionRecord], prefix: str = ""
) -> list[SessionRecord]:
    """The record of each session file under ``root`` whose ID starts with ``prefix``, from its
    header line (``load``); a file's name is its ID, so no other file is opened."""
    try:  # a root that cannot be read raises (a glob would say "no sessions")
        names = os.listdir(root)
    except FileNotFoundError:
        return []  # no session created yet
    records = []
    for path in (root / n for n in names if n.endswith(".jsonl")):
        if not path.stem.startswith(prefix):  # the ID, not the name: "a." is no prefix of "a"
            continue
        try:
            records.append(load(path, validate_session_id(path.stem)))
        except (InvalidSessionIdError, SessionNotFoundError):
            continue  # not a session file, or deleted meanwhile
        except CorruptSessionError as exc:  # left out, but not silently
            logger.warning("not listed: %s", exc.at(str(path.absolute())))
        except OSError as exc:  # one odd file (a directory, unreadable) hides no other
            logger.warning("not listed: %s: %s", path.absolute(), exc)
    return records


def _same_as_kept(entries: list[Entry], repeat: Entry) -> bool:
    """Whether ``repeat`` encodes exactly as the kept entry of its ID (first wins, as appends do).

    Linear, but only reached for a repeated ID, which only hand-editing produces.
    """
    kept = next(e for e in entries if e.id == repeat.id)
    return encode_entry(kept) == encode_entry(repeat)


def decode_lines(lines: list[tuple[int, bytes]], session_id: str) -> list[Entry]:
    """Every entry of a session file's ``(offset, line)`` list, applying the line tables of
    docs/design.md#file-store."""
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


# -- torn-tail detection: is an unterminated final line a strict prefix of JSON? ---------------

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


def utf8_prefix(data: bytes) -> str | None:
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
