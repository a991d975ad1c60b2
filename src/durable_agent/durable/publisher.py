"""The lifecycle publisher: told about init, branch, fork and compaction after they commit.

A publisher is any callable or object with ``publish(event)``, sync or async. It is called outside
the agent's lock, on the mutating call's path, so it can call back into the agent; keep it fast.
Its exceptions are logged to ``durable_agent.publisher`` and never raised: the change it reports is
already committed.

The lifecycle events (docs/design.md#receipts) have one constructor each here, shared by both
executors. Each carries its idempotency key, so a redelivered event is recognisable.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from ..session.entries import Entry
from .events import Event

__all__ = [
    "Publisher",
    "PublisherLike",
    "branched_event",
    "compacted_event",
    "deliver",
    "fork_events",
    "init_event",
]

logger = logging.getLogger("durable_agent.publisher")


@runtime_checkable
class Publisher(Protocol):
    def publish(self, event: Event) -> Awaitable[None] | None: ...


PublisherLike = Publisher | Callable[[Event], Any]


def init_event(session_id: str, leaf_id: str, open_id: str) -> Event:
    """``session_init`` after ``new()`` (``open_id``: fresh per call)."""
    return Event(
        type="session_init",
        session_id=session_id,
        leaf_id=leaf_id,
        idempotency_key=f"session_init:{session_id}:{open_id}",
    )


def branched_event(session_id: str, from_id: str, leaf_id: str, op_id: str) -> Event:
    return Event(
        type="session_branched",
        session_id=session_id,
        from_id=from_id,
        leaf_id=leaf_id,
        idempotency_key=f"session_branched:{session_id}:{op_id}",
    )


def fork_events(
    child_id: str, source_id: str, leaf_id: str, occurrence: str | None = None
) -> list[Event]:
    """``session_forked`` then the child's ``session_init``, in that order. ``occurrence`` names
    a later fork into a child made before (one going on to a longer path), whose keys would
    otherwise be the first fork's: on Temporal, a publish workflow ID already taken."""
    more = f":{occurrence}" if occurrence else ""
    return [
        Event(
            type="session_forked",
            session_id=child_id,
            parent_id=source_id,
            idempotency_key=f"session_forked:{child_id}:{source_id}{more}",
        ),
        Event(
            type="session_init",
            session_id=child_id,
            leaf_id=leaf_id,
            idempotency_key=f"session_init:{child_id}:fork{more}",
        ),
    ]


def compacted_event(session_id: str, entry: Entry) -> Event:
    """``session_compacted`` for a stored compaction entry (the new leaf)."""
    return Event(
        type="session_compacted",
        session_id=session_id,
        entries=[entry],
        leaf_id=entry.id,
        idempotency_key=f"session_compacted:{session_id}:{entry.id}",
    )


async def publish_one(publisher: PublisherLike, event: Event) -> None:
    """Hand ``event`` to ``publisher``, awaiting it if it is async; exceptions propagate."""
    method = getattr(publisher, "publish", None)
    target: Callable[[Event], Any] = method if callable(method) else publisher  # type: ignore[assignment]
    result = target(event)
    if inspect.isawaitable(result):
        await result


async def deliver(publisher: PublisherLike | None, events: Iterable[Event]) -> None:
    """Deliver ``events`` in order; without a publisher they are dropped. Never raises."""
    if publisher is None:
        return
    for event in events:
        try:
            await publish_one(publisher, event)
        except Exception:
            logger.exception(
                "publisher failed for %s (%s)", event.type, event.idempotency_key or ""
            )
