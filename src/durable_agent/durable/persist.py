"""Stamping a persist batch (SPEC §4.3): one algorithm for runs, appends and compactions.

Every copy gets a fresh ID, the current parent and one shared ``created_at``. Durable copies chain:
each becomes the next one's parent. An ephemeral copy hangs off the current parent and leaves it
unchanged, so it never becomes anyone's parent in the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from ..session.entries import Entry, MessageEntry

__all__ = ["Stamped", "is_durable", "see_through", "stamp"]

T = TypeVar("T")


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


async def see_through(write: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """Await ``write`` to its end even if the caller is cancelled meanwhile.

    Returns the finished future and whether a cancellation arrived during the wait. A store
    finishes a write it started (SPEC §2.1); so must whoever applies it: a write that reached
    the store is applied (and gets its receipt) before the cancellation proceeds, or the handle
    and the store disagree (issue 11.1).
    """
    task = asyncio.ensure_future(write)
    cancelled = False
    while True:
        try:
            await asyncio.shield(task)  # a cancel stops the wait, not the write
        except asyncio.CancelledError:
            if not task.cancelled():
                cancelled = True
                if not task.done():
                    continue
        except Exception:
            pass  # the caller reads it from the task
        return task, cancelled
