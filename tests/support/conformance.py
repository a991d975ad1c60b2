"""Entries and sessions the store conformance suites build (tests/test_store_conformance.py,
tests/test_store_seq_conformance.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from durable_agent.ai import Message, TextContent
from durable_agent.session import Entry, MessageEntry, Store, encode_entry

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def msg(
    entry_id: str, text: str | None = None, parent: str | None = None, at: datetime = T0
) -> Entry:
    """A user-message entry that is equal to any other built with the same arguments."""
    return MessageEntry(
        id=entry_id,
        parent_id=parent,
        created_at=at,
        message=Message(
            role="user",
            content=[TextContent(text=text if text is not None else f"text of {entry_id}")],
            timestamp=T0,
        ),
    )


def wires(entries: Sequence[Entry]) -> list[str]:
    return [encode_entry(e) for e in entries]


async def fresh(store: Store, session_id: str = "s1") -> str:
    await store.create_session(session_id)
    return session_id
