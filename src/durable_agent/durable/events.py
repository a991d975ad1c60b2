"""Events: run receipts and lifecycle notifications share one model.

On a run stream every event has type ``agent`` and wraps an inner :class:`AgentEvent`; a
``message_end`` carries the entry it stored (its **receipt**) and the new leaf, so whatever a
consumer has seen is already in the store.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from ..agent.events import AgentEvent
from ..session.entries import Entry

__all__ = ["Event", "EventFields", "EventType"]

EventType = Literal[
    "session_init", "session_branched", "session_forked", "session_compacted", "agent"
]


EntryT = TypeVar("EntryT")


class EventFields(BaseModel, Generic[EntryT]):
    """An event's fields, generic in how its entries are held: :class:`Event` holds them as
    :class:`Entry` objects, the Temporal ``WireEvent`` as their encodings, so the two models
    cannot drift apart field by field. Field order here is the wire order of both."""

    model_config = ConfigDict(frozen=True)

    type: EventType
    session_id: str
    agent: AgentEvent | None = None
    parent_id: str | None = None
    """``session_forked``: the source session."""
    from_id: str | None = None
    """``session_branched``: the old leaf (may be ``""``)."""
    leaf_id: str | None = None
    entries: list[EntryT] | None = None
    """Receipts and ``session_compacted``: the stored entries, headers included."""
    idempotency_key: str | None = None
    """Lifecycle events: stable across redeliveries, unique per occurrence."""


class Event(EventFields[Entry]):
    """A run event (``agent``) or a lifecycle event; unset fields are ``None``."""
