"""The entry codec's encoding: exact bytes and key order, what is written and what is left out,
and that equal entries encode alike and round-trip.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from durable_agent.ai import Message, TextContent, ThinkingContent, ToolCall, user_message
from durable_agent.session import (
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    decode_entry,
    encode_entry,
    entry_to_wire,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


HEADER = '"id":"e1","created_at":"2026-01-02T03:04:05Z"'


def msg(text: str = "hi") -> Message:
    return Message(role="user", content=[TextContent(text=text)], timestamp=T0)


def keys(line: str) -> list[str]:
    return list(json.loads(line))


def test_message_entry_exact_encoding() -> None:
    e = MessageEntry(id="e1", created_at=T0, message=msg())
    assert encode_entry(e) == (
        '{"type":"message",' + HEADER + ',"message":{"role":"user",'
        '"content":[{"type":"text","text":"hi"}],"timestamp":"2026-01-02T03:04:05Z"}}'
    )


def test_message_entry_key_order_with_everything() -> None:
    e = MessageEntry(
        id="e2", parent_id="e1", created_at=T0, message=msg(), meta=True, synthetic=True
    )
    assert keys(encode_entry(e)) == [
        "type",
        "id",
        "parent_id",
        "created_at",
        "meta",
        "synthetic",
        "message",
    ]


@pytest.mark.parametrize(
    ("meta", "synthetic", "expected"),
    [
        (False, False, ["type", "id", "created_at", "message"]),
        (True, False, ["type", "id", "created_at", "meta", "message"]),
        (False, True, ["type", "id", "created_at", "synthetic", "message"]),
    ],
)
def test_meta_and_synthetic_only_when_true(
    meta: bool, synthetic: bool, expected: list[str]
) -> None:
    line = encode_entry(
        MessageEntry(id="e1", created_at=T0, message=msg(), meta=meta, synthetic=synthetic)
    )
    assert keys(line) == expected
    data = json.loads(line)
    for flag in ("meta", "synthetic"):
        if flag in data:
            assert data[flag] is True


def test_compaction_exact_encoding_keeps_defaults() -> None:
    c = CompactionEntry(id="e1", created_at=T0, summary="sum")
    assert encode_entry(c) == (
        '{"type":"compaction",' + HEADER + ',"summary":"sum","first_kept_id":"","tokens_before":0}'
    )
    c2 = CompactionEntry(
        id="c", parent_id="p", created_at=T0, summary="", first_kept_id="u2", tokens_before=1234
    )
    assert keys(encode_entry(c2)) == [
        "type",
        "id",
        "parent_id",
        "created_at",
        "summary",
        "first_kept_id",
        "tokens_before",
    ]
    assert decode_entry(encode_entry(c2)) == c2


def test_custom_entry_exact_encoding_keeps_extras_after_kind() -> None:
    c = CustomEntry.model_validate(
        {"id": "e1", "created_at": T0, "kind": "audit", "zeta": 1, "alpha": {"b": [True, None]}}
    )
    assert encode_entry(c) == (
        '{"type":"custom",' + HEADER + ',"kind":"audit","zeta":1,"alpha":{"b":[true,null]}}'
    )


def test_parent_id_omitted_when_none_and_written_when_set() -> None:
    root = MessageEntry(id="e1", created_at=T0, message=msg())
    assert "parent_id" not in json.loads(encode_entry(root))
    child = MessageEntry(id="e2", parent_id="e1", created_at=T0, message=msg())
    assert json.loads(encode_entry(child))["parent_id"] == "e1"


@pytest.mark.parametrize("parent", ['"parent_id":"",', '"parent_id":null,', ""])
def test_empty_null_or_absent_parent_reads_as_none(parent: str) -> None:
    line = (
        '{"type":"compaction","id":"c",' + parent + '"created_at":"2026-01-02T03:04:05Z",'
        '"summary":"s","first_kept_id":"","tokens_before":0}'
    )
    e = decode_entry(line)
    assert e.parent_id is None
    assert "parent_id" not in encode_entry(e)


def test_ephemeral_is_never_written_and_decodes_false() -> None:
    e = MessageEntry(id="e1", created_at=T0, message=msg(), ephemeral=True, meta=True)
    line = encode_entry(e)
    assert "ephemeral" not in line
    assert keys(line) == ["type", "id", "created_at", "meta", "message"]
    back = decode_entry(line)
    assert isinstance(back, MessageEntry)
    assert back.ephemeral is False
    assert back.meta is True
    forged = line.replace('"meta":true', '"meta":true,"ephemeral":true')
    forged_back = decode_entry(forged)
    assert isinstance(forged_back, MessageEntry)
    assert forged_back.ephemeral is False


def test_non_ascii_unescaped_and_no_whitespace() -> None:
    text = 'héllo ✓ 日本語 🎉 "quoted" back\\slash\nnew line\ttab'
    e = MessageEntry(id="ü-1", created_at=T0, message=msg(text))
    line = encode_entry(e)
    assert "héllo ✓ 日本語 🎉" in line
    assert "\\u" not in line
    assert "\n" not in line
    assert "\t" not in line
    assert ": " not in line.replace(text, "").replace("\\n", "")
    assert line == json.dumps(json.loads(line), ensure_ascii=False, separators=(",", ":"))
    assert line.encode("utf-8").decode("utf-8") == line
    back = decode_entry(line)
    assert isinstance(back, MessageEntry)
    assert back.message.text() == text


def test_equal_entries_give_identical_strings() -> None:
    def build(tz: timezone) -> MessageEntry:
        return MessageEntry(
            id="e1",
            parent_id="e0",
            created_at=T0.astimezone(tz),
            message=Message(
                role="assistant",
                content=[
                    ThinkingContent(thinking="t", signature="s"),
                    ToolCall(id="c", name="n", arguments={"b": 1, "a": 2}),
                ],
                timestamp=T0.astimezone(tz),
            ),
        )

    a, b = build(UTC), build(timezone(timedelta(hours=5, minutes=30)))
    assert a == b
    assert encode_entry(a) == encode_entry(b)
    naive = MessageEntry(id="e1", created_at=datetime(2026, 1, 2, 3, 4, 5), message=msg())
    aware = MessageEntry(id="e1", created_at=T0, message=msg())
    assert encode_entry(naive) == encode_entry(aware)


def test_entry_to_wire_matches_encoding() -> None:
    e = MessageEntry(id="e1", parent_id="p", created_at=T0, message=msg(), synthetic=True)
    wire = entry_to_wire(e)
    assert wire == json.loads(encode_entry(e))
    assert list(wire) == keys(encode_entry(e))


def test_decode_accepts_bytes() -> None:
    e = MessageEntry(id="e1", created_at=T0, message=msg("ñ"))
    assert decode_entry(encode_entry(e).encode("utf-8")) == e


@pytest.mark.parametrize(
    "entry",
    [
        MessageEntry(id="e1", created_at=T0, message=user_message("x"), meta=True),
        MessageEntry(id="e1", parent_id="e0", created_at=T0, message=msg(), synthetic=True),
        CompactionEntry(id="c1", parent_id="e1", created_at=T0, summary="s", tokens_before=9),
        CustomEntry.model_validate({"id": "x", "created_at": T0, "kind": "k", "v": [1, "2"]}),
    ],
)
def test_round_trip_and_stable_encoding(
    entry: MessageEntry | CompactionEntry | CustomEntry,
) -> None:
    line = encode_entry(entry)
    back = decode_entry(line)
    assert back == entry
    assert type(back) is type(entry)
    assert encode_entry(back) == line
