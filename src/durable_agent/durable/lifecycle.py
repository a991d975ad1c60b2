"""The lifecycle events (docs/design.md#receipts): one constructor each, shared by both executors.

Each carries its idempotency key, so a redelivered event is recognisable.
"""

from __future__ import annotations

from ..session.entries import Entry
from .events import Event
from .publisher import branched_key, compacted_key, fork_init_key, forked_key, init_key

__all__ = ["branched_event", "compacted_event", "fork_events", "init_event"]


def init_event(session_id: str, leaf_id: str, open_id: str) -> Event:
    """``session_init`` after ``new()`` (``open_id``: fresh per call)."""
    return Event(
        type="session_init",
        session_id=session_id,
        leaf_id=leaf_id,
        idempotency_key=init_key(session_id, open_id),
    )


def branched_event(session_id: str, from_id: str, leaf_id: str, op_id: str) -> Event:
    return Event(
        type="session_branched",
        session_id=session_id,
        from_id=from_id,
        leaf_id=leaf_id,
        idempotency_key=branched_key(session_id, op_id),
    )


def fork_events(child_id: str, source_id: str, leaf_id: str) -> list[Event]:
    """``session_forked`` then the child's ``session_init``, in that order."""
    return [
        Event(
            type="session_forked",
            session_id=child_id,
            parent_id=source_id,
            idempotency_key=forked_key(child_id, source_id),
        ),
        Event(
            type="session_init",
            session_id=child_id,
            leaf_id=leaf_id,
            idempotency_key=fork_init_key(child_id),
        ),
    ]


def compacted_event(session_id: str, entry: Entry) -> Event:
    """``session_compacted`` for a stored compaction entry (the new leaf)."""
    return Event(
        type="session_compacted",
        session_id=session_id,
        entries=[entry],
        leaf_id=entry.id,
        idempotency_key=compacted_key(session_id, entry.id),
    )
