"""The lifecycle publisher: told about init, branch, fork and compaction after they commit.

A publisher is any callable or object with ``publish(event)``, sync or async. It is called outside
the agent's lock, on the mutating call's path, so it can call back into the agent; keep it fast.
Its exceptions are logged to ``durable_agent.publisher`` and never raised: the change it reports is
already committed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from .events import Event

__all__ = [
    "Publisher",
    "PublisherLike",
    "branched_key",
    "compacted_key",
    "deliver",
    "fork_init_key",
    "forked_key",
    "init_key",
]

logger = logging.getLogger("durable_agent.publisher")


@runtime_checkable
class Publisher(Protocol):
    def publish(self, event: Event) -> Awaitable[None] | None: ...


PublisherLike = Publisher | Callable[[Event], Any]


def init_key(session_id: str, open_id: str) -> str:
    return f"session_init:{session_id}:{open_id}"


def fork_init_key(child_id: str) -> str:
    return f"session_init:{child_id}:fork"


def forked_key(child_id: str, source_id: str) -> str:
    return f"session_forked:{child_id}:{source_id}"


def branched_key(session_id: str, op_id: str) -> str:
    return f"session_branched:{session_id}:{op_id}"


def compacted_key(session_id: str, entry_id: str) -> str:
    return f"session_compacted:{session_id}:{entry_id}"


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
