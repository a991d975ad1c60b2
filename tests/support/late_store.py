"""A real store whose next matching append fails and then lands later (issue 11 item 8b).

The append raises ``StoreUnavailableError`` (the client stopped waiting: a timeout, a dropped
connection), while the write itself is applied when the test releases it, as a store that applied
it after the caller gave up would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from durable_agent.session import Entry, MessageEntry, StoreUnavailableError
from durable_agent.session.store import SessionRecord
from durable_agent.stores import FileStore, MemoryStore


class LateStore:
    """A real store whose next matching append raises ``StoreUnavailableError`` and lands later,
    when the test releases it (a write the store applied after the client stopped waiting)."""

    def __init__(self, inner: FileStore | MemoryStore) -> None:
        self.inner = inner
        self._hold: Callable[[Sequence[Entry]], bool] | None = None
        self._release = asyncio.Event()
        self.landed: asyncio.Task[None] | None = None

    def hold_next(self, match: Callable[[Sequence[Entry]], bool]) -> None:
        self._hold = match

    async def land(self) -> None:
        self._release.set()
        assert self.landed is not None
        await self.landed

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        match = self._hold
        if match is not None and match(entries):
            self._hold = None
            batch = list(entries)

            async def later() -> None:
                await self._release.wait()
                await self.inner.append_entries(session_id, batch)

            self.landed = asyncio.create_task(later())
            raise StoreUnavailableError("timed out waiting for the store")
        await self.inner.append_entries(session_id, entries)


def is_tool_result(entries: Sequence[Entry]) -> bool:
    return any(isinstance(e, MessageEntry) and e.message.role == "tool_result" for e in entries)


def is_user(entries: Sequence[Entry]) -> bool:
    return any(isinstance(e, MessageEntry) and e.message.role == "user" for e in entries)


def results_for(entries: Sequence[Entry], call_id: str) -> list[MessageEntry]:
    return [
        e
        for e in entries
        if isinstance(e, MessageEntry)
        and e.message.role == "tool_result"
        and e.message.tool_call_id == call_id
    ]
