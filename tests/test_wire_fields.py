"""JSON input takes a native path through the wire's lenient fields (``ai/wirefields.py``): it
must accept exactly what the Python validators accept, and read it alike.

Python input goes through the Python validators alone (unchanged), so every property here decodes
the same JSON text both ways, ``model_validate_json(text)`` and
``model_validate(json.loads(text))``, and expects the same entry or message, or a failure both
ways. A store's load is JSON input: ``decode_entry``'s fast path (pydantic's JSON parser) must
agree with its general path (``json.loads``, then Python validation) on every line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from durable_agent.ai import Message
from durable_agent.session import (
    CompactionEntry,
    EntryDecodeError,
    MessageEntry,
    decode_entry,
    wire_to_entry,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Time values the wire may hold: the canonical form and the other forms ``parse_time`` reads,
#: forms only pydantic's own parser would read, out-of-range and junk values.
TIME_VALUES = [
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05.5Z",
    "2026-01-02T03:04:05.123456Z",
    "2026-01-02T03:04:05.123456789Z",
    "2026-01-02t03:04:05z",
    "2026-01-02 03:04:05Z",
    "2026-01-02T04:04:05+01:00",
    "2026-01-02T03:04:05-00:00",
    " 2026-01-02T03:04:05Z ",
    "2026-01-02T03:04Z",
    "2026-01-02T03:04:05+0100",
    "2026-01-02",
    "2026-02-30T00:00:00Z",
    "2026-12-31T23:59:60Z",
    "2026-01-01T24:00:00Z",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59.999999Z",
    "\uff12026-01-02T03:04:05Z",
    "1767225600",
    "yesterday",
    "",
    1767225600,
    1.5,
    True,
    None,
    [],
]
times = st.sampled_from(TIME_VALUES)
ids = st.sampled_from(["", "a", "e1", "x" * 40])
parents = st.sampled_from([None, "", "p", 5])
texts = st.text(max_size=12)
arguments: st.SearchStrategy[object] = (
    st.none() | st.dictionaries(texts, st.integers() | texts, max_size=3) | st.just([])
)
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries(
        {"type": st.just("tool_call"), "id": texts, "name": texts},
        optional={"arguments": arguments},
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["bogus", 3])}),
)
contents: st.SearchStrategy[object] = (
    st.none() | st.lists(blocks, max_size=3) | st.just({}) | st.just("text")
)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool_result", "nobody"])},
    optional={"content": contents, "timestamp": times, "tool_call_id": st.none() | texts},
)
flags = st.booleans() | st.sampled_from([None, "no", "yes", "true", "0", "maybe", 0, 1, 2, [1]])
"""Stored flags, damaged ones included (both paths must read them alike)."""
message_entries = st.fixed_dictionaries(
    {"type": st.just("message"), "id": ids},
    optional={
        "parent_id": parents,
        "created_at": times,
        "meta": flags,
        "synthetic": flags,
        "ephemeral": st.sampled_from([True, False, "yes", None, [1]]),
        "message": messages,
    },
)
compactions = st.fixed_dictionaries(
    {"type": st.just("compaction"), "id": ids, "summary": texts, "created_at": times},
    optional={"parent_id": parents},
)


def both_ways(model: type[BaseModel], value: Any) -> tuple[Any, Any]:
    """``value``'s JSON text validated as JSON and as ``json.loads`` output: the model, or
    ``"invalid"`` (the messages may differ: a JSON error lists the native attempt too)."""
    text = json.dumps(value)
    out: list[Any] = []
    for validate in (model.model_validate_json, lambda t: model.model_validate(json.loads(t))):
        try:
            out.append(validate(text))
        except ValidationError:
            out.append("invalid")
    return out[0], out[1]


@SETTINGS
@given(messages)
def test_a_message_reads_alike_from_json_and_from_python(value: dict[str, Any]) -> None:
    as_json, as_python = both_ways(Message, value)
    assert as_json == as_python


@SETTINGS
@given(message_entries.filter(lambda v: "created_at" in v) | compactions)
def test_an_entry_header_reads_alike_from_json_and_from_python(value: dict[str, Any]) -> None:
    """(Without ``created_at`` the entry is stamped with the time it is built.)"""
    model = MessageEntry if value["type"] == "message" else CompactionEntry
    as_json, as_python = both_ways(model, value)
    assert as_json == as_python


def _decoded(decode: Any, arg: Any) -> Any:
    try:
        return decode(arg)
    except EntryDecodeError:
        return "invalid"


@SETTINGS
@given(message_entries)
def test_a_stored_line_decodes_alike_on_the_fast_and_the_general_path(
    value: dict[str, Any],
) -> None:
    line = json.dumps(value, separators=(",", ":"))
    assert _decoded(decode_entry, line) == _decoded(wire_to_entry, json.loads(line))


def test_json_times_in_the_written_form_read_as_aware_utc() -> None:
    """The canonical form is parsed by pydantic itself: the same instant, a zero offset."""
    message = Message.model_validate_json('{"role":"user","timestamp":"2026-01-02T03:04:05.25Z"}')
    assert message.timestamp == datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)
    assert message.timestamp is not None and message.timestamp.utcoffset() is not None
    assert (
        message.model_dump_json()
        == '{"role":"user","content":[],"timestamp":"2026-01-02T03:04:05.25Z"}'
    )


def test_json_null_collections_read_as_empty() -> None:
    message = Message.model_validate_json('{"role":"user","content":null}')
    assert message.content == []
    call = '{"type":"tool_call","id":"c","name":"n","arguments":null}'
    message = Message.model_validate_json('{"role":"user","content":[' + call + "]}")
    assert message.tool_calls()[0].arguments == {}


def test_the_json_schema_is_the_python_validators() -> None:
    """The native path accepts nothing more, so it adds nothing to the JSON Schema."""
    entry = MessageEntry.model_json_schema()
    assert entry["properties"]["created_at"] == {
        "format": "date-time",
        "title": "Created At",
        "type": "string",
    }
    assert entry["properties"]["parent_id"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    message = entry["$defs"]["Message"]
    assert message["properties"]["timestamp"]["anyOf"] == [
        {"format": "date-time", "type": "string"},
        {"type": "null"},
    ]
    assert message["properties"]["content"]["type"] == "array"
    assert entry["$defs"]["ToolCall"]["properties"]["arguments"]["type"] == "object"


@pytest.mark.parametrize("flag", ["no", "yes", "0", 1, None, "maybe", 2])
def test_a_damaged_flag_reads_alike_on_both_paths(flag: Any) -> None:
    """A stored ``meta`` that is not a boolean: pydantic's bool rules on both paths (``"no"``
    is false, ``"maybe"`` is no boolean), ``null`` as absent."""
    line = (
        '{"type":"message","id":"e1","created_at":"2026-01-02T03:04:05.000000Z",'
        f'"message":{{"role":"user","content":[]}},"meta":{json.dumps(flag)}}}'
    )
    fast, general = _decoded(decode_entry, line), _decoded(wire_to_entry, json.loads(line))
    assert fast == general
    expected = {"no": False, "yes": True, "0": False, 1: True, None: False}.get(flag, "invalid")
    assert (fast if fast == "invalid" else fast.meta) == expected
