"""The entry wire format: one compact JSON object per entry, byte-stable.

``encode_entry`` writes keys in a fixed order with no whitespace and non-ASCII unescaped, so equal
entries give identical strings: stores compare these strings to make appends idempotent.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from ..ai.messages import MAX_NESTING, Message, nests_deeper
from ..ai.timefmt import format_time, parse_time
from .entries import (
    RESERVED_WIRE_KEYS,
    CompactionEntry,
    CustomEntry,
    Entry,
    EntryBase,
    MessageEntry,
    custom_class,
)
from .errors import EntryDecodeError, EntryEncodeError
from .ids import quoted, shortened

__all__ = [
    "MAX_NESTING",
    "bulk_decoding",
    "decode_entry",
    "encode_entry",
    "entry_to_wire",
    "wire_to_entry",
]


def _header(entry: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"type": entry.type, "id": entry.id}
    if entry.parent_id:
        out["parent_id"] = entry.parent_id
    out["created_at"] = format_time(entry.created_at)
    return out


def entry_to_wire(entry: Entry) -> dict[str, Any]:
    """The JSON object ``encode_entry`` writes, as a dict with keys in wire order."""
    out = _header(entry)
    if isinstance(entry, MessageEntry):
        if entry.meta:
            out["meta"] = True
        if entry.synthetic:
            out["synthetic"] = True
        out["message"] = entry.message.model_dump(mode="json")
    elif isinstance(entry, CompactionEntry):
        out["summary"] = entry.summary
        out["first_kept_id"] = entry.first_kept_id
        out["tokens_before"] = entry.tokens_before
    elif isinstance(entry, CustomEntry):
        out["kind"] = entry.kind
        base = set(CustomEntry.model_fields)
        own = {n for n in type(entry).model_fields if n not in base}
        if own:
            out.update(entry.model_dump(mode="json", by_alias=True, include=own))
        for key, value in (entry.model_extra or {}).items():
            if key not in RESERVED_WIRE_KEYS:
                out[key] = value
    else:
        raise TypeError(f"not an entry: {type(entry).__name__}")
    return out


def encode_entry(entry: Entry) -> str:
    """One compact JSON object (UTF-8, non-ASCII unescaped, no newline).

    Custom data JSON cannot hold (bytes, a set, NaN or an infinity, nesting deeper than the
    encoder goes) raises :class:`EntryEncodeError`, never the encoder's ``TypeError`` or
    ``RecursionError``: an entry that cannot be written is refused typed, before any store
    writes its batch. NaN is refused, not written as Python's ``NaN`` (which no other JSON reader
    takes) nor as ``null`` (which would change the data): every store, and Temporal's payloads,
    would read it back differently.
    """
    deep = f"its data is nested deeper than {MAX_NESTING}"
    try:
        wire = entry_to_wire(entry)
        text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        # nesting past the cap takes more brackets than that: most entries skip the walk
        if text.count("[") + text.count("{") > MAX_NESTING and nests_deeper(wire, MAX_NESTING):
            raise EntryEncodeError("", entry.id, deep)
        return text
    except EntryEncodeError:
        raise
    except RecursionError:
        reason = deep
    except (TypeError, ValueError) as exc:  # ValueError: pydantic's serializer, a cycle, NaN
        if not isinstance(entry, EntryBase):
            raise
        if str(exc).startswith("Out of range float"):
            reason = "its data holds NaN or an infinity, numbers JSON has not"
        elif "serialization depth" in str(exc):  # pydantic's own limit, past ours
            reason = deep
        else:
            reason = f"its data has no JSON form ({exc})"
    raise EntryEncodeError("", entry.id, reason)


def _header_fields(data: dict[str, Any]) -> dict[str, Any]:
    entry_id = data.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        raise EntryDecodeError("bad entry header: id must be a non-empty string")
    bad = f"bad entry header for {quoted(entry_id)}"  # an ID typed by hand may be huge
    parent = data.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise EntryDecodeError(f"{bad}: parent_id must be a string")
    created = data.get("created_at")
    if not isinstance(created, str):
        raise EntryDecodeError(f"{bad}: created_at must be a string")
    try:
        created_at = parse_time(created)
    except ValueError as exc:
        raise EntryDecodeError(f"{bad}: {exc}") from exc
    return {"id": entry_id, "parent_id": parent or None, "created_at": created_at}


def wire_to_entry(data: Any) -> Entry:
    """Build an entry from a decoded JSON object (see :func:`decode_entry`)."""
    try:
        return _wire_to_entry(data)
    except RecursionError:
        raise EntryDecodeError("invalid entry: nested too deep") from None


def _flag(data: dict[str, Any], name: str) -> Any:
    """A stored flag as the fast path reads it (pydantic's bool rules: ``"no"`` is false, a value
    it refuses makes the entry invalid), except that ``null`` reads as absent."""
    value = data.get(name)
    return False if value is None else value


def _wire_to_entry(data: Any) -> Entry:
    if not isinstance(data, dict):
        raise EntryDecodeError(f"entry must be a JSON object, not {type(data).__name__}")
    kind = data.get("type")
    if kind not in ("message", "compaction", "custom"):
        raise EntryDecodeError(f'unknown entry type "{shortened(str(kind))}"')
    header = _header_fields(data)
    try:
        if kind == "message":
            message = Message.model_validate(data.get("message"))
            return MessageEntry(
                **header,
                message=message,
                meta=_flag(data, "meta"),
                synthetic=_flag(data, "synthetic"),
            )
        if kind == "custom":
            # An absent or empty kind is just an unregistered kind: a bare CustomEntry, as
            # encode_entry writes one (decoding must reverse every encoding).
            custom_kind = data.get("kind", "")
            if not isinstance(custom_kind, str):
                shown = quoted(header["id"])
                raise EntryDecodeError(f"custom entry {shown}: kind must be a string")
            fields = {k: v for k, v in data.items() if k not in RESERVED_WIRE_KEYS}
            cls = custom_class(custom_kind) or CustomEntry
            return cls.model_validate({**fields, **header, "kind": custom_kind})
        return CompactionEntry(
            **header,
            summary=data.get("summary", ""),
            first_kept_id=data.get("first_kept_id") or "",
            tokens_before=data.get("tokens_before", 0),
        )
    except ValidationError as exc:
        shown = quoted(header["id"])
        raise EntryDecodeError(f"invalid {kind} entry {shown}: {_first_problem(exc)}") from exc


def _first_problem(exc: ValidationError) -> str:
    """pydantic's report in one line (it takes four and a URL, and a failure's message is shown
    whole: a log line, the Temporal UI): where, what, how many more."""
    errors = exc.errors(include_url=False)
    where = ".".join(shortened(str(part)) for part in errors[0]["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    problem = errors[0]["msg"]
    for given in errors[0].get("ctx", {}).values():  # what was typed (a block's type, say)
        if isinstance(given, str):
            problem = problem.replace(given, shortened(given))
    return f"{where + ': ' if where else ''}{problem}{more}"


_MESSAGE_HEAD = '{"type":"message","id":"'


def decode_entry(data: str | bytes) -> Entry:
    """Reverse :func:`encode_entry`; raises :class:`EntryDecodeError` for anything invalid.

    A message line as ``encode_entry`` writes it is validated in one pass by pydantic's JSON
    parser (about twice as fast as parsing, then validating). What that pass refuses, or would
    read otherwise than the general path (a ``created_at`` that is not a string, an empty ID, a
    stored ``ephemeral`` flag, which the general path ignores), takes the general path, which
    also gives the canonical error. This runs once per entry of every load, so it slices nothing
    and calls the model's validator directly.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise EntryDecodeError(f"invalid entry JSON: {exc}") from exc
    # The header, in canonical order, precedes the body: created_at is a string there.
    body = text.find('"message":')
    if text.startswith(_MESSAGE_HEAD) and text.find('"created_at":"', 0, body) >= 0:
        try:
            entry: MessageEntry = MessageEntry.__pydantic_validator__.validate_json(text)
        except ValidationError:
            pass
        else:
            if entry.id and not entry.ephemeral:
                return entry
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EntryDecodeError(f"invalid entry JSON: {exc}") from exc
    except RecursionError:
        raise EntryDecodeError("invalid entry JSON: nested too deep") from None
    return wire_to_entry(parsed)


#: Objects a decode must have left in the youngest generation to be moved on unvisited (about
#: 500 entries' worth); smaller decodes, such as a follower's frequent reads, leave the collector
#: as it is.
_PROMOTE_AFTER = 5_000


@contextlib.contextmanager
def bulk_decoding() -> Iterator[None]:
    """Pause the cyclic garbage collector while a store decodes a whole session.

    Decoding allocates many small acyclic objects (about ten per message entry); on a 100k-entry
    load the collector's repeated full passes over the growing heap cost about 40% of the time
    while freeing nothing. Resumed as is, its first pass would still visit everything the load
    made (a fifth of a 10k-entry load's decoding time), so a large decode's objects are moved,
    unvisited, to the oldest generation (``gc.freeze()`` then ``gc.unfreeze()``, documented to
    do exactly that), whose full passes visit them as they would have anyway; being acyclic,
    they are freed by their reference counts whatever their generation. Not when the application
    froze objects itself (``gc.freeze()`` before forking workers, say): that unfreeze would
    release them too. Nor on Python 3.12, which starts with objects frozen (the base and MRO
    tuples of its built-in types) that cannot be told from an application's.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_count()[0] > _PROMOTE_AFTER and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
