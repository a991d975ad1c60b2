"""Property tests for the codec (SPEC §1.1, §1.5): round trip and byte-stable encoding.

Generated values stay inside what the wire can represent: optional strings are ``None`` or
non-empty, usage and tool outputs are ``None`` or non-empty, because the wire omits empty values
and they read back as ``None`` (see the omission rules in §1.1).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from durable_agent.ai import (
    Cost,
    FileContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolOutput,
    Usage,
)
from durable_agent.ai.timefmt import UtcDatetime, format_time, parse_time, to_utc
from durable_agent.session import (
    CompactionEntry,
    CustomEntry,
    EntryDecodeError,
    MessageEntry,
    custom_class,
    decode_entry,
    encode_entry,
    register_custom,
)
from durable_agent.session.entries import RESERVED_WIRE_KEYS

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PROPERTY_KIND = "codec-property-sample"


@register_custom(PROPERTY_KIND)
class Sample(CustomEntry):
    """A registered kind exercising aliases, optionals, nested values and times."""

    title: str = ""
    count: int = Field(default=0, alias="n")
    score: float | None = None
    tags: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    when: UtcDatetime | None = None


# --- building blocks -----------------------------------------------------------------------------

text = st.text(max_size=40)
nonempty = st.text(min_size=1, max_size=20)
opt_str = st.none() | nonempty
finite = st.floats(allow_nan=False, allow_infinity=False)

ZONES = [
    UTC,
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-8)),
    timezone(timedelta(hours=14)),
]
times = st.datetimes(
    min_value=datetime(2, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.none() | st.sampled_from(ZONES),
)

json_scalars = st.none() | st.booleans() | st.integers() | finite | text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=10,
)


def _is_wire_empty(value: Any) -> bool:
    """Top-level values the wire omits (they would read back as ``None``)."""
    if value is None or value is False:
        return True
    return type(value) in (str, int, float, dict, list) and not value


nonempty_json = json_values.filter(lambda v: not _is_wire_empty(v))

USAGE_INTS = ["input", "output", "cache_read", "cache_write", "reasoning", "input_audio"]
USAGE_INTS.append("output_audio")

costs = st.builds(Cost, **{k: st.floats(min_value=0, max_value=1e6) for k in USAGE_INTS})
usages = st.builds(
    Usage, **{k: st.integers(min_value=0, max_value=10**9) for k in USAGE_INTS}, cost=costs
).filter(lambda u: u.model_dump(mode="json") != {})

leaf_blocks: st.SearchStrategy[Any] = st.one_of(
    st.builds(TextContent, text=text, signature=opt_str),
    st.builds(ThinkingContent, thinking=text, signature=opt_str),
    st.builds(ImageContent, data=text, mime_type=text),
    st.builds(
        FileContent,
        data=opt_str,
        url=opt_str,
        file_id=opt_str,
        mime_type=opt_str,
        filename=opt_str,
    ),
)
outputs = st.builds(
    ToolOutput,
    content=st.lists(leaf_blocks, max_size=2),
    raw=st.none() | nonempty_json,
    is_error=st.booleans(),
).filter(lambda o: o.model_dump(mode="json") != {})
tool_calls = st.builds(
    ToolCall,
    id=text,
    name=text,
    arguments=st.dictionaries(text, json_values, max_size=4),
    signature=opt_str,
    server=st.booleans(),
    server_type=opt_str,
    output=st.none() | outputs,
)
blocks = leaf_blocks | tool_calls

messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool_result"]),
    content=st.lists(blocks, max_size=5),
    api=opt_str,
    provider=opt_str,
    model=opt_str,
    error=opt_str,
    usage=st.none() | usages,
    stop_reason=st.none() | st.sampled_from(["stop", "length", "tool_use", "error", "aborted"]),
    tool_call_id=opt_str,
    tool_name=opt_str,
    is_error=st.booleans(),
    timestamp=st.none() | times,
)

headers = st.fixed_dictionaries(
    {"id": nonempty, "parent_id": st.none() | nonempty, "created_at": times}
)

message_entries = st.builds(
    lambda h, m, meta, eph, syn: MessageEntry(
        **h, message=m, meta=meta, ephemeral=eph, synthetic=syn
    ),
    headers,
    messages,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
compactions = st.builds(
    lambda h, s, k, t: CompactionEntry(**h, summary=s, first_kept_id=k, tokens_before=t),
    headers,
    text,
    st.just("") | nonempty,
    st.integers(min_value=0, max_value=10**12),
)
extra_keys = text.filter(lambda k: k not in RESERVED_WIRE_KEYS)
bare_customs = st.builds(
    lambda h, kind, extras: CustomEntry.model_validate({**h, "kind": kind, **extras}),
    headers,
    text.filter(lambda k: custom_class(k) is None),
    st.dictionaries(extra_keys, json_values, max_size=5),
)
samples = st.builds(
    lambda h, title, n, score, tags, data, when, extras: Sample.model_validate(
        {
            **h,
            "title": title,
            "n": n,
            "score": score,
            "tags": tags,
            "data": data,
            "when": when,
            **extras,
        }
    ),
    headers,
    text,
    st.integers(),
    st.none() | finite,
    st.lists(text, max_size=3),
    st.dictionaries(text, json_values, max_size=3),
    st.none() | times,
    st.dictionaries(
        extra_keys.filter(lambda k: k not in Sample.model_fields and k != "n"),
        json_values,
        max_size=3,
    ),
)
entries = st.one_of(message_entries, compactions, bare_customs, samples)


# --- properties --------------------------------------------------------------------------------


def stored_form(entry: Any) -> Any:
    """What a store gives back: the entry with ``ephemeral`` cleared."""
    if isinstance(entry, MessageEntry) and entry.ephemeral:
        return entry.model_copy(update={"ephemeral": False})
    return entry


@SETTINGS
@given(entries)
def test_decode_reverses_encode(entry: Any) -> None:
    line = encode_entry(entry)
    back = decode_entry(line)
    assert back == stored_form(entry)
    assert type(back) is type(entry)


@SETTINGS
@given(entries)
def test_encoding_is_stable(entry: Any) -> None:
    line = encode_entry(entry)
    assert encode_entry(decode_entry(line)) == line
    assert encode_entry(decode_entry(line.encode("utf-8"))) == line


@SETTINGS
@given(entries)
def test_encoding_shape(entry: Any) -> None:
    line = encode_entry(entry)
    assert "\n" not in line
    parsed = json.loads(line)
    assert line == json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
    assert list(parsed)[:2] == ["type", "id"]
    assert ("parent_id" in parsed) == (entry.parent_id is not None)
    assert parsed["created_at"].endswith("Z")
    if isinstance(entry, MessageEntry):
        assert "ephemeral" not in parsed
        assert ("meta" in parsed) == entry.meta
        assert ("synthetic" in parsed) == entry.synthetic
        assert list(parsed)[-1] == "message"


@SETTINGS
@given(messages)
def test_message_json_round_trip(message: Message) -> None:
    dumped = message.model_dump_json()
    assert Message.model_validate_json(dumped) == message
    assert Message.model_validate_json(dumped).model_dump_json() == dumped


@SETTINGS
@given(times)
def test_time_format_round_trip(value: datetime) -> None:
    text_form = format_time(value)
    assert text_form.endswith("Z")
    assert not text_form[:-1].endswith("0") or "." not in text_form
    assert parse_time(text_form) == to_utc(value)
    assert parse_time(text_form).utcoffset() == timedelta(0)
    assert format_time(parse_time(text_form)) == text_form


@SETTINGS
@given(times, st.integers(min_value=0, max_value=999), st.sampled_from(ZONES))
def test_nanosecond_digits_truncate(value: datetime, nanos: int, zone: timezone) -> None:
    local = value.replace(tzinfo=value.tzinfo or UTC).astimezone(zone)
    offset = local.strftime("%z")
    wire = local.strftime("%Y-%m-%dT%H:%M:%S") + f".{local.microsecond:06d}{nanos:03d}"
    wire = f"{local.year:04d}" + wire[wire.index("-") :] + offset[:3] + ":" + offset[3:]
    assert parse_time(wire) == value.replace(tzinfo=value.tzinfo or UTC)


# Decoding arbitrary, roughly entry-shaped objects only ever succeeds or raises EntryDecodeError.
fuzz_objects = st.dictionaries(
    st.sampled_from(
        [
            "type",
            "id",
            "parent_id",
            "created_at",
            "message",
            "meta",
            "synthetic",
            "summary",
            "first_kept_id",
            "tokens_before",
            "kind",
            "n",
            "title",
        ]
    ),
    json_values
    | st.sampled_from(["message", "compaction", "custom", PROPERTY_KIND, "2026-01-02T03:04:05Z"])
    | st.builds(lambda m: m.model_dump(mode="json"), messages),
    max_size=8,
)


@SETTINGS
@given(fuzz_objects | json_values)
def test_decode_fails_only_with_entry_decode_error(value: Any) -> None:
    try:
        entry = decode_entry(json.dumps(value))
    except EntryDecodeError:
        return
    assert encode_entry(decode_entry(encode_entry(entry))) == encode_entry(entry)
