"""The rules every store applies to an append, written once.

An already-stored ID is skipped when its encoding is identical and is a conflict otherwise; repeats
within one batch compare with their first occurrence. An entry to write names a parent the session
holds or the batch brings, or none (a root): the log stays a tree, and a writer that loaded the
session before it was deleted and created again under its ID cannot add to the new one
(docs/design.md#store-contract). Stores call :func:`plan_append` with the encodings they hold and
write only what it returns, so a conflict or a missing parent writes nothing of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass

from .codec import encode_entry
from .entries import Entry
from .errors import EntryConflictError, EntryEncodeError, EntryTooLargeError, ParentNotFoundError

__all__ = ["Guard", "encode_batch", "outside_parents", "plan_append"]


def encode_batch(
    session_id: str, entries: Sequence[Entry], *, limit: int | None = None
) -> list[tuple[Entry, str]]:
    """Encode every entry first (so an encoding error or an oversized entry writes nothing):
    data with no JSON form, and text with no UTF-8 form (every store writes UTF-8), are refused
    here, typed, for all stores alike (:class:`EntryEncodeError`, naming the session)."""
    out: list[tuple[Entry, str]] = []
    for entry in entries:
        if not entry.id:
            raise ValueError("entry id must not be empty")
        try:
            wire = encode_entry(entry)
        except EntryEncodeError as exc:  # raised by the codec, which knows no session
            raise EntryEncodeError(session_id, entry.id, exc.reason) from None
        try:
            size = len(wire.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise EntryEncodeError(session_id, entry.id, EntryEncodeError.no_utf8(exc)) from None
        if limit is not None and size > limit:
            raise EntryTooLargeError(session_id, entry.id, size, limit)
        out.append((entry, wire))
    return out


def plan_append(
    session_id: str,
    batch: Sequence[tuple[Entry, str]],
    stored: Callable[[str], str | None],
    *,
    holds: Callable[[str], bool] | None = None,
) -> list[tuple[Entry, str]]:
    """The part of ``batch`` still to write; raises EntryConflictError on a mismatch, and
    ParentNotFoundError for an entry to write whose parent is neither stored nor in the batch.

    ``stored(entry_id)`` returns the stored encoding of an ID of the batch, or ``None`` if it is
    not stored; ``holds(entry_id)`` whether the session holds an ID (``None``: parents are not
    checked here; MongoStore checks them itself, with :func:`outside_parents`).
    """
    seen: dict[str, str] = {}
    todo: list[tuple[Entry, str]] = []
    for entry, wire in batch:
        first = seen.get(entry.id)
        if first is not None:
            if first != wire:
                raise EntryConflictError(session_id, entry.id)
            continue
        seen[entry.id] = wire
        existing = stored(entry.id)
        if existing is not None:
            if existing != wire:
                raise EntryConflictError(session_id, entry.id)
            continue
        todo.append((entry, wire))
    if holds is not None:
        for entry_id, parent in outside_parents(todo, seen).items():
            if not holds(parent):
                raise ParentNotFoundError(session_id, entry_id, parent)
    return todo


def outside_parents(todo: Sequence[tuple[Entry, str]], batch_ids: Container[str]) -> dict[str, str]:
    """Entry ID -> parent ID, for each entry to write whose parent the batch does not bring:
    those parents the session must hold."""
    return {
        entry.id: entry.parent_id
        for entry, _ in todo
        if entry.parent_id is not None and entry.parent_id not in batch_ids
    }


@dataclass(frozen=True)
class Guard:
    """A guarded append's condition (docs/design.md#store-contract): the newest stored entry
    that is not one of the batch's is ``last_id`` (``None``: the session holds nothing else)."""

    last_id: str | None

    def holds(self, newest_first: Iterable[str], batch: Sequence[tuple[Entry, str]]) -> bool:
        ours = {entry.id for entry, _ in batch}
        found = next((entry_id for entry_id in newest_first if entry_id not in ours), None)
        return found == self.last_id
