"""``WireEvent`` is derived from ``Event``, and its encoding is the one recorded
in workflow histories: same bytes, same field order, so recorded runs replay and old query
answers and continue-as-new inputs still decode. Unset (``None``) fields are left out, at the top
level and in the inner agent event, so an operator reads no ``null`` noise."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent.activities.contracts import BodyRefs, WireEvent, event_from_wire, event_to_wire
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.durable.events import Event, EventFields, EventType
from durable_agent.session import MessageEntry

NOW = datetime(2026, 1, 1, tzinfo=UTC)

RECORDED_ORDER = [
    "position",
    "type",
    "session_id",
    "agent",
    "parent_id",
    "from_id",
    "leaf_id",
    "entries",
    "idempotency_key",
    "refs",
]


class _RecordedWireEvent(BaseModel):
    """The model as it was written field by field when the histories were recorded."""

    model_config = ConfigDict(frozen=True)

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


def _receipt() -> Event:
    message = Message(role="assistant", content=[TextContent(text="hi")], timestamp=NOW)
    entry = MessageEntry(id="e1", parent_id="e0", message=message, created_at=NOW)
    return Event(
        type="agent",
        session_id="s1",
        agent=AgentEvent(type="message_end", message=message),
        parent_id="p",
        from_id="f",
        leaf_id="e1",
        entries=[entry],
        idempotency_key="k",
    )


def _wires() -> list[WireEvent]:
    full = event_to_wire(_receipt(), position=7)
    refs = BodyRefs(entry_ids=["e1"], message="e1")
    return [
        full,
        full.model_copy(update={"refs": refs}),
        event_to_wire(Event(type="session_init", session_id="s2"), position=1),
    ]


def test_wire_event_bytes_match_the_recorded_model() -> None:
    for wire in _wires():
        old = _RecordedWireEvent.model_validate(dict(wire))
        recorded = old.model_dump_json(exclude_none=True).encode()
        assert wire.model_dump_json().encode() == recorded
        [new_payload] = pydantic_data_converter.payload_converter.to_payloads([wire])
        [old_payload] = pydantic_data_converter.payload_converter.to_payloads([old])
        assert new_payload.data == recorded
        keys = list(json.loads(new_payload.data))
        assert keys == [k for k in RECORDED_ORDER if k in keys]
        assert "null" not in new_payload.data.decode()
        back = pydantic_data_converter.payload_converter.from_payloads([old_payload], [WireEvent])
        assert back == [wire]


def test_wire_event_fields_are_events_fields_plus_position_and_refs() -> None:
    shared = [name for name in EventFields.model_fields]
    assert list(WireEvent.model_fields) == ["position", *shared, "refs"]
    assert list(Event.model_fields) == shared


def test_event_round_trips_through_the_wire() -> None:
    event = _receipt()
    wire = event_to_wire(event, position=3)
    assert wire.position == 3 and wire.entries is not None and wire.refs is None
    assert event_from_wire(wire) == event
    assert event_from_wire(wire.model_copy(update={"refs": BodyRefs(message="e1")})) == event
    bare = Event(type="session_branched", session_id="s", from_id="")
    assert event_from_wire(event_to_wire(bare)) == bare
