"""A real store whose chosen append is held open after it reached the store (a slow ``fsync``).

Cancel-race tests need a write that has landed but not yet returned, and a cancellation (or a
concurrent verb) arriving in that window. :class:`GatedStore` delegates every call to a real store;
the first append whose batch matches the armed predicate writes through, sets ``entered`` and then
waits for ``release`` before returning, as a FileStore does whose ``fsync`` is slow. Like every
store (docs/design.md#store-contract) it finishes a started write when its caller is cancelled: the
caller sees ``CancelledError``, the entries stay stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from durable_agent.session import Entry, GuardedStore, MessageEntry, RetentionStore, SessionRecord
from durable_agent.session.appendplan import Guard

__all__ = ["GatedStore", "has_role", "has_text"]

Predicate = Callable[[Sequence[Entry]], bool]


def has_role(role: str) -> Predicate:
    """A batch holding a message of ``role``."""

    def match(entries: Sequence[Entry]) -> bool:
        return any(isinstance(e, MessageEntry) and e.message.role == role for e in entries)

    return match


def has_text(text: str) -> Predicate:
    """A batch holding a message whose text is ``text``."""

    def match(entries: Sequence[Entry]) -> bool:
        return any(isinstance(e, MessageEntry) and e.message.text() == text for e in entries)

    return match


class GatedStore:
    """Delegates to ``inner``; holds the first append matching :meth:`arm`'s predicate."""

    def __init__(self, inner: RetentionStore) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        """Set once the held batch is in ``inner`` (the write reached the store)."""
        self.release = asyncio.Event()
        self.held: list[Entry] = []
        """The batch that was held."""
        self._armed: Predicate | None = None
        self._before = False
        self._writes: set[asyncio.Future[bool]] = set()

    def arm(self, predicate: Predicate, *, before: bool = False) -> None:
        """Hold the next append whose batch matches ``predicate`` (once): after it reached the
        store, or with ``before`` before it does (a write slow to start)."""
        self._armed, self._before = predicate, before

    async def let_go(self) -> None:
        """Release the held write and wait until it returned, then close the gate again: a hold
        armed since waits for its own ``release`` (setting ``release`` alone would let the next
        hold through too, as soon as it entered)."""
        self.release.set()
        await asyncio.gather(*self._writes)
        self.release.clear()

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_session(self, session_id: str) -> SessionRecord:
        return await self.inner.load_session(session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        await self._append(session_id, entries, None)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """The inner store's guarded append (a fork's copy, a decision), held like any other."""
        return await self._append(session_id, entries, Guard(last_id))

    async def _append(self, session_id: str, entries: Sequence[Entry], guard: Guard | None) -> bool:
        armed = self._armed
        if armed is None or not armed(entries):
            return await self._write(session_id, list(entries), guard)
        self._armed = None
        write = asyncio.ensure_future(self._slow_write(session_id, list(entries), guard))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)
        return await asyncio.shield(write)  # a started write finishes if the caller is cancelled

    async def _write(self, session_id: str, entries: list[Entry], guard: Guard | None) -> bool:
        if guard is not None:
            assert isinstance(self.inner, GuardedStore)
            return await self.inner.append_if_last(session_id, entries, guard.last_id)
        await self.inner.append_entries(session_id, entries)
        return True

    async def _slow_write(self, session_id: str, entries: list[Entry], guard: Guard | None) -> bool:
        if self._before:
            self.entered.set()
            await self.release.wait()
        done = await self._write(session_id, entries, guard)
        self.held = entries
        if not self._before:
            self.entered.set()
            await self.release.wait()
        return done
