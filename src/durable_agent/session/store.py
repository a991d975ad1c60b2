"""The Store protocol: the three operations the durable agent performs, nothing more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .entries import Entry
from .record import SessionRecord

__all__ = ["Store"]


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
