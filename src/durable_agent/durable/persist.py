"""Stamping entries: the one algorithm every stored entry goes through, in both executors.

A batch is stamped at a leaf (:func:`stamp`): every copy gets a fresh ID, the current parent and
one shared ``created_at``. Durable copies chain, each becoming the next one's parent; an ephemeral
copy hangs off the current parent and leaves it unchanged, so it is never anyone's parent in the
store. A producer that commits its own output (a Temporal model or tool activity) gets the header
the next entry will have beforehand (:func:`reserve`) and commits under it, so its entry is
exactly what :func:`stamp` would have made. See docs/design.md#stamps-and-producers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from ..ai.timefmt import UtcDatetime
from ..session.entries import Entry, EntryBase, MessageEntry

__all__ = [
    "CommitEffects",
    "Header",
    "Stamped",
    "is_durable",
    "reserve",
    "see_through",
    "stamp",
]

T = TypeVar("T")
E = TypeVar("E", bound=EntryBase)


class Header(BaseModel):
    """An entry header: its ID, its parent (``None`` for a root) and its ``created_at``.

    Also what a workflow hands a producing activity (it crosses the Temporal boundary as is)."""

    model_config = ConfigDict(frozen=True)

    id: str
    parent_id: str | None = None
    created_at: UtcDatetime

    def on(self, entry: E) -> E:
        """``entry`` under this header; every other field kept."""
        return entry.model_copy(
            update={"id": self.id, "parent_id": self.parent_id, "created_at": self.created_at}
        )


def is_durable(entry: Entry) -> bool:
    """Stored (everything but ephemeral message entries)."""
    return not (isinstance(entry, MessageEntry) and entry.ephemeral)


def reserve(leaf_id: str, now: datetime, new_id: Callable[[], str]) -> Header:
    """The header of the next entry chained from ``leaf_id`` (``""``: a root)."""
    return Header(id=new_id(), parent_id=leaf_id or None, created_at=now)


@dataclass(frozen=True)
class Stamped:
    copies: list[Entry]
    """Every copy, in input order (ephemeral included)."""
    durable: list[Entry]
    """The copies to store: the batch's receipt."""
    leaf_id: str
    """The leaf after the batch."""

    @classmethod
    def stored(cls, entry: Entry) -> Stamped:
        """The one-entry batch a producer committed under a reserved header."""
        return cls(copies=[entry], durable=[entry], leaf_id=entry.id)


class CommitEffects(Protocol):
    """What stamping and storing a batch need from an executor: a clock, an ID source and the
    commit (in process the handle's state; on Temporal ``workflow.now()``, ``workflow.random()``
    and an ``append_entries`` activity)."""

    def now(self) -> datetime: ...

    def new_id(self) -> str: ...

    async def commit(self, stamped: Stamped) -> Stamped:
        """Store ``stamped.durable`` in one append (and apply it to the handle's state); returns
        the batch as stored (a remote commit may report clock fields the store kept from an
        earlier write of the same entries).

        A store error raised from elsewhere (an activity's failure) names the original error
        type in a ``kind`` attribute, so a run can tell a store refusal it answers (an oversized
        tool result) from one that fails it."""
        ...


def stamp(
    entries: Sequence[Entry],
    leaf_id: str,
    now: datetime,
    new_id: Callable[[], str],
    *,
    keep_ids: bool = False,
) -> Stamped:
    """Copy ``entries`` with headers ``{new ID, parent, now}`` starting at ``leaf_id``.

    ``keep_ids``: an entry that has an ID keeps it (a Temporal run's inputs, whose fresh IDs its
    client chose, so it can tell them in the store: docs/design.md#receipts)."""
    parent = leaf_id
    copies: list[Entry] = []
    durable: list[Entry] = []
    for entry in entries:
        header = reserve(parent, now, new_id)
        if keep_ids and entry.id:
            header = header.model_copy(update={"id": entry.id})
        copy = header.on(entry)
        copies.append(copy)
        if is_durable(copy):
            durable.append(copy)
            parent = copy.id
    return Stamped(copies=copies, durable=durable, leaf_id=parent)


async def see_through(write: Awaitable[T]) -> tuple[asyncio.Future[T], bool]:
    """Await ``write`` to its end even if the caller is cancelled meanwhile.

    Returns the finished future and whether a cancellation arrived during the wait. A store
    finishes a write it started; so must whoever applies it: a write that reached the store is
    applied (and gets its receipt) before the cancellation proceeds, or the handle and the store
    disagree (docs/design.md#cancellation).
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
