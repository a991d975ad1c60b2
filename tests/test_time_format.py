"""The wire's time format: UTC with ``Z``, trailing zeros of the fraction dropped, and what the
decoder accepts and refuses.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from durable_agent.ai import Message, TextContent
from durable_agent.ai.timefmt import format_time, parse_time
from durable_agent.session import (
    EntryDecodeError,
    MessageEntry,
    decode_entry,
    encode_entry,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def msg(text: str = "hi") -> Message:
    return Message(role="user", content=[TextContent(text=text)], timestamp=T0)


@pytest.mark.parametrize(
    ("micro", "text"),
    [
        (0, "2026-01-02T03:04:05Z"),
        (500000, "2026-01-02T03:04:05.5Z"),
        (120000, "2026-01-02T03:04:05.12Z"),
        (123456, "2026-01-02T03:04:05.123456Z"),
        (100, "2026-01-02T03:04:05.0001Z"),
        (1, "2026-01-02T03:04:05.000001Z"),
    ],
)
def test_time_formatting_drops_trailing_zeros(micro: int, text: str) -> None:
    t = T0.replace(microsecond=micro)
    assert format_time(t) == text
    e = MessageEntry(id="e1", created_at=t, message=msg())
    assert json.loads(encode_entry(e))["created_at"] == text


def test_time_formatting_converts_to_utc_with_z() -> None:
    t = datetime(2026, 1, 2, 0, 4, 5, tzinfo=timezone(timedelta(hours=-3)))
    assert format_time(t) == "2026-01-02T03:04:05Z"
    assert format_time(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


def test_time_formatting_pads_early_years() -> None:
    t = datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert format_time(t) == "0005-01-02T03:04:05Z"
    assert parse_time(format_time(t)) == t


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", T0),
        ("2026-01-02T03:04:05.5Z", T0.replace(microsecond=500000)),
        ("2026-01-02T05:04:05+02:00", T0),
        ("2026-01-01T23:34:05-03:30", T0),
        ("2026-01-02T03:04:05+00:00", T0),
        ("2026-01-02T03:04:05.123456789Z", T0.replace(microsecond=123456)),
        ("2026-01-02T03:04:05.999999999Z", T0.replace(microsecond=999999)),
        ("2026-01-02T03:04:05.1234567+01:00", T0.replace(hour=2, microsecond=123456)),
        ("2026-01-02T03:04:05.000000001Z", T0),
    ],
)
def test_decoding_times(text: str, expected: datetime) -> None:
    assert parse_time(text) == expected
    line = '{"type":"compaction","id":"c","created_at":"' + text + '","summary":"s"}'
    e = decode_entry(line)
    assert e.created_at == expected
    assert e.created_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-02T03:04:05",
        "2026-01-02T03:04:05.1234567890Z",
        "2026-01-02T03:04:05.Z",
        "2026-01-02",
        "2026-13-02T03:04:05Z",
        "2026-01-02T25:04:05Z",
        "2026-01-02T03:04:05+2:00",
        "2026-01-02T03:04:05+0200",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "",
        "now",
    ],
)
def test_bad_times_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)
    line = '{"type":"compaction","id":"c","created_at":"' + text + '","summary":"s"}'
    with pytest.raises(EntryDecodeError):
        decode_entry(line)
