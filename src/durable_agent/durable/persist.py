"""Stamping a persist batch (SPEC §4.3): one algorithm for runs, appends and compactions.

Every copy gets a fresh ID, the current parent and one shared ``created_at``. Durable copies chain:
each becomes the next one's parent. An ephemeral copy hangs off the current parent and leaves it
unchanged, so it never becomes anyone's parent in the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..session.entries import Entry, MessageEntry

__all__ = ["Stamped", "is_durable", "stamp"]


def is_durable(entry: Entry) -> bool:
    """Stored (everything but ephemeral message entries)."""
    return not (isinstance(entry, MessageEntry) and entry.ephemeral)


@dataclass(frozen=True)
class Stamped:
    copies: list[Entry]
    """Every copy, in input order (ephemeral included)."""
    durable: list[Entry]
    """The copies to store: the batch's receipt."""
    leaf_id: str
    """The leaf after the batch."""


def stamp(
    entries: Sequence[Entry], leaf_id: str, now: datetime, new_id: Callable[[], str]
) -> Stamped:
    """Copy ``entries`` with headers ``{new ID, parent, now}`` starting at ``leaf_id``."""
    parent = leaf_id or None
    copies: list[Entry] = []
    durable: list[Entry] = []
    for entry in entries:
        copy = entry.model_copy(update={"id": new_id(), "parent_id": parent, "created_at": now})
        copies.append(copy)
        if is_durable(copy):
            durable.append(copy)
            parent = copy.id
    return Stamped(copies=copies, durable=durable, leaf_id=parent or "")
