"""The delta channel's key and the in-memory channel (one process; tests and in-process use)."""

from __future__ import annotations

from dataclasses import dataclass

from .patch import Delta

__all__ = ["DeltaKey", "MemoryDeltas"]


@dataclass(frozen=True)
class DeltaKey:
    """One model reply: its run and the event position of its ``message_start``."""

    session_id: str
    run_id: str
    position: int


class MemoryDeltas:
    """Deltas in a dict; ``clear`` drops a reply's deltas once its message is stored."""

    def __init__(self) -> None:
        self._log: dict[DeltaKey, list[Delta]] = {}

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        self._log.setdefault(key, []).append(delta)

    async def read(self, key: DeltaKey, after: int = 0) -> list[Delta]:
        """Deltas past index ``after`` in arrival order."""
        return list(self._log.get(key, [])[after:])

    async def clear(self, key: DeltaKey) -> None:
        self._log.pop(key, None)
