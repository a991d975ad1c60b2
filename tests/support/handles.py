"""What the handle tests share: a store that records and fails calls on demand, and readers of
messages and entries (tests/test_durable_agent.py, tests/test_handle_lifecycle.py)."""

from __future__ import annotations

from collections.abc import Sequence

from durable_agent import EntryTooLargeError, MessageEntry
from durable_agent.ai import Message
from durable_agent.session import Entry, RetentionStore, SessionRecord


class WrappedStore:
    """Delegates to a real store; records calls and can be told to fail upcoming calls."""

    def __init__(self, inner: RetentionStore) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.fail_appends: list[BaseException | None] = []
        """Outcomes of the next appends, in order: an exception to raise, or None to pass."""
        self.fail_loads: list[BaseException] = []

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        self.calls.append("create_session")
        return await self.inner.create_session(session_id, parent_id)

    async def load_session(self, session_id: str) -> SessionRecord:
        self.calls.append("load_session")
        return await self.inner.load_session(session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        self.calls.append("load_entries")
        if self.fail_loads:
            raise self.fail_loads.pop(0)
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        self.calls.append("append_entries")
        if self.fail_appends:
            exc = self.fail_appends.pop(0)
            if exc is not None:
                raise exc
        await self.inner.append_entries(session_id, entries)


def too_large(session_id: str = "s") -> EntryTooLargeError:
    """A non-retryable store error (a Temporal activity would not retry it either)."""
    return EntryTooLargeError(session_id, "e", 10, 5)


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]
