"""Events as they cross the Temporal boundary: a position, the entries encoded.

The run workflow records them for its ``events(after)`` query and the ``publish`` activity takes
them as its input, so they sit below both (``workflows/`` -> ``activities/``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..durable.events import Event, EventFields
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


class _Positioned(FrozenModel):
    position: int


class WireEvent(EventFields[str], _Positioned):
    """An :class:`Event` with its position in the run and its entries encoded.

    Derived from :class:`EventFields`, so a field added to ``Event`` travels too. The wire
    order (``position`` first, ``refs`` last) is fixed by the base order and recorded in
    histories: ``tests/temporal/test_wire_event.py`` pins it."""

    refs: BodyRefs | None = None
    """Where the bodies are stored (receipts and events repeating a stored message)."""


_SHARED = tuple(name for name in EventFields.model_fields if name != "entries")
"""The fields ``Event`` and ``WireEvent`` hold alike, copied as they are."""


def event_to_wire(event: Event, position: int = 0) -> WireEvent:
    entries = None if event.entries is None else [encode_entry(e) for e in event.entries]
    shared = {name: getattr(event, name) for name in _SHARED}
    return WireEvent(position=position, entries=entries, **shared)


def event_from_wire(wire: WireEvent) -> Event:
    """The event ``wire`` encodes; its ``position`` and ``refs`` stay behind."""
    entries = None if wire.entries is None else [decode_entry(w) for w in wire.entries]
    return Event(entries=entries, **{name: getattr(wire, name) for name in _SHARED})
