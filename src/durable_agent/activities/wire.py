"""Events as they cross the Temporal boundary: a position, the entries encoded.

The run workflow records them for its ``events(after)`` query and the ``publish`` activity takes
them as its input, so they sit below both (``workflows/`` -> ``activities/``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..agent.events import AgentEvent
from ..durable.events import Event, EventType
from ..session.codec import decode_entry, encode_entry

__all__ = ["BodyRefs", "FrozenModel", "WireEvent", "event_from_wire", "event_to_wire"]


class FrozenModel(BaseModel):
    """The base of every type that crosses the Temporal boundary: immutable once built."""

    model_config = ConfigDict(frozen=True)


class BodyRefs(FrozenModel):
    """The stored entries an event's message bodies are (see ``event_bodies``).

    A body named here may be left out of the event (``None``) in a query answer or a
    continue-as-new input; the client reads the entry from the store and puts it back."""

    entry_ids: list[str] | None = None
    """The receipt's entries (``WireEvent.entries``)."""
    message: str | None = None
    """``agent.message``: the entry holding that message."""
    result: str | None = None
    """``agent.result`` (``tool_execution_end``)."""
    args: str | None = None
    """``agent.args``: the assistant entry whose tool call ``agent.tool_call_id`` has them."""
    input: list[str] | None = None
    """``agent.input`` (``turn_start``), one entry per injected message."""


class WireEvent(FrozenModel):
    """An :class:`Event` with its position in the run and its entries encoded."""

    position: int
    type: EventType
    session_id: str
    agent: AgentEvent | None = None
    parent_id: str | None = None
    from_id: str | None = None
    leaf_id: str | None = None
    entries: list[str] | None = None
    idempotency_key: str | None = None
    refs: BodyRefs | None = None
    """Where the bodies are stored (receipts and events repeating a stored message)."""


def event_to_wire(event: Event, position: int = 0) -> WireEvent:
    return WireEvent(
        position=position,
        type=event.type,
        session_id=event.session_id,
        agent=event.agent,
        parent_id=event.parent_id,
        from_id=event.from_id,
        leaf_id=event.leaf_id,
        entries=None if event.entries is None else [encode_entry(e) for e in event.entries],
        idempotency_key=event.idempotency_key,
    )


def event_from_wire(wire: WireEvent) -> Event:
    return Event(
        type=wire.type,
        session_id=wire.session_id,
        agent=wire.agent,
        parent_id=wire.parent_id,
        from_id=wire.from_id,
        leaf_id=wire.leaf_id,
        entries=None if wire.entries is None else [decode_entry(w) for w in wire.entries],
        idempotency_key=wire.idempotency_key,
    )
