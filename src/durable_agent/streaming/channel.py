"""The delta channel's key and contract, and the in-memory channel (one process only).

A channel is a **side** channel: the workflow never sees it (no history cost, SPEC §7.4) and it is
never the source of truth (the stored entry is). Publishing is best effort; a reader checks every
delta's ``(attempt, seq)`` so a lost, late or duplicated write can never reorder what it shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .patch import Delta

__all__ = ["Cursor", "DeltaChannel", "DeltaKey", "MemoryDeltas"]

Cursor = tuple[int, int]
"""``(attempt, seq)`` of the last delta a reader took; ``(0, 0)`` before the first."""


@dataclass(frozen=True)
class DeltaKey:
    """One model reply: its run and the event position of its ``message_start``."""

    session_id: str
    run_id: str
    position: int

    def name(self) -> str:
        """A string key, unique per reply (session IDs have no ``/``; positions are padded)."""
        return f"{self.session_id}/{self.run_id}/{self.position:09d}"


class DeltaChannel(Protocol):
    """Where a ``call_model`` activity publishes its reply's deltas and clients read them."""

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        """Store one delta; may raise (the writer then stops publishing for its attempt)."""

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        """Deltas past ``after`` in ``(attempt, seq)`` order (``[]`` once cleared)."""

    async def clear(self, key: DeltaKey) -> None:
        """Drop a reply's deltas (its message is stored)."""


class MemoryDeltas:
    """Deltas in a dict: for a worker and its clients in one process (tests, MemoryStore)."""

    def __init__(self) -> None:
        self._log: dict[DeltaKey, list[Delta]] = {}

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        self._log.setdefault(key, []).append(delta)

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        deltas = [d for d in self._log.get(key, []) if (d.attempt, d.seq) > after]
        return sorted(deltas, key=lambda d: (d.attempt, d.seq))

    async def clear(self, key: DeltaKey) -> None:
        self._log.pop(key, None)

    def size(self) -> int:
        """Deltas held (the bench's bound check)."""
        return sum(len(v) for v in self._log.values())
