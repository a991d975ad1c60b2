"""The Store protocol: the three operations the durable agent performs, nothing more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .entries import Entry
from .errors import SessionExistsError, SessionNotFoundError
from .record import SessionRecord

__all__ = ["Store", "open_session"]


@runtime_checkable
class Store(Protocol):
    """Where sessions live. Implementations must follow SPEC §2.1.

    - ``load_entries`` returns the log in append order; the last entry is the resume leaf.
    - ``append_entries`` is idempotent by entry ID: an identical re-append is skipped, a different
      one raises ``EntryConflictError`` and writes nothing of the batch.
    - A backend that is down raises ``StoreUnavailableError``; IDs are validated before any I/O.
    """

    async def create_session(
        self, session_id: str, parent_id: str | None = None
    ) -> SessionRecord: ...

    async def load_entries(self, session_id: str) -> list[Entry]: ...

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None: ...


async def open_session(store: Store, session_id: str) -> list[Entry]:
    """Open-or-create (SPEC §4.1 step 2): the session's entries, creating it (empty) if unknown.

    A lost create race (``SessionExistsError``) loads again, so concurrent first opens succeed.
    """
    try:
        return await store.load_entries(session_id)
    except SessionNotFoundError:
        pass
    try:
        await store.create_session(session_id)
        return []
    except SessionExistsError:
        return await store.load_entries(session_id)
