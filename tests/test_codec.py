"""SPEC §1.2 to §1.5: entries, IDs, session-ID rules, SessionRecord and the entry codec."""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent, ThinkingContent, ToolCall, user_message
from durable_agent.ai.timefmt import format_time, parse_time
from durable_agent.session import (
    MAX_SESSION_ID_LENGTH,
    CompactionEntry,
    CustomEntry,
    EntryDecodeError,
    EntryEncodeError,
    InvalidSessionIdError,
    MessageEntry,
    SessionError,
    SessionRecord,
    decode_entry,
    encode_entry,
    entry_to_wire,
    new_id,
    validate_session_id,
)
from durable_agent.session.codec import MAX_NESTING

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
HEADER = '"id":"e1","created_at":"2026-01-02T03:04:05Z"'


def msg(text: str = "hi") -> Message:
    return Message(role="user", content=[TextContent(text=text)], timestamp=T0)


def keys(line: str) -> list[str]:
    return list(json.loads(line))


# --- §1.2 entries ----------------------------------------------------------------------------


def test_message_entry_flags_default_false() -> None:
    e = MessageEntry(message=msg())
    assert (e.meta, e.ephemeral, e.synthetic) == (False, False, False)
    assert e.type == "message"
    assert e.parent_id is None


def test_compaction_entry_defaults() -> None:
    c = CompactionEntry(summary="s")
    assert c.first_kept_id == ""
    assert c.tokens_before == 0
    assert c.type == "compaction"


def test_entries_are_frozen() -> None:
    e = MessageEntry(message=msg())
    with pytest.raises(ValueError):
        e.meta = True  # type: ignore[misc]


def test_empty_parent_id_is_none_in_models() -> None:
    assert MessageEntry(message=msg(), parent_id="").parent_id is None
    assert CompactionEntry(summary="s", parent_id="").parent_id is None


def test_created_at_is_aware_utc() -> None:
    e = MessageEntry(message=msg(), created_at=datetime(2026, 1, 2, 3, 4, 5))
    assert e.created_at == T0
    assert e.created_at.utcoffset() == timedelta(0)
    assert MessageEntry(message=msg()).created_at.tzinfo is not None


# --- §1.3 SessionRecord and IDs ------------------------------------------------------------------


def test_session_record_has_exactly_three_fields() -> None:
    assert list(SessionRecord.model_fields) == ["id", "parent_id", "created_at"]
    r = SessionRecord(id="s1", created_at=T0)
    assert r.parent_id is None
    with pytest.raises(ValueError):
        r.id = "s2"  # type: ignore[misc]


def test_new_id_is_16_lowercase_hex() -> None:
    ids = [new_id() for _ in range(500)]
    for i in ids:
        assert re.fullmatch(r"[0-9a-f]{16}", i), i
    assert len(set(ids)) == len(ids)


def test_new_id_is_eight_bytes_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def fake(n: int) -> bytes:
        asked.append(n)
        return bytes.fromhex("9f86d081884c7d65")

    monkeypatch.setattr(secrets, "token_bytes", fake)
    assert new_id() == "9f86d081884c7d65"
    assert asked == [8]


# --- §1.4 session-ID rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "sid",
    [
        "a",
        "user-42",
        "ticket_9.v2",
        "tenant:thread@example.com",
        "ABCxyz019-_.:@",
        "...",
        ".hidden",
        "a..b",
        "x" * MAX_SESSION_ID_LENGTH,
    ],
)
def test_valid_session_ids(sid: str) -> None:
    assert validate_session_id(sid) == sid


@pytest.mark.parametrize(
    "sid",
    [
        "",
        ".",
        "..",
        "x" * (MAX_SESSION_ID_LENGTH + 1),
        "a/b",
        "../etc/passwd",
        "a\\b",
        "a b",
        "tab\there",
        "line\n",
        "\nline",
        "nul\x00",
        "é",
        "café",
        "\uff46ull",  # fullwidth f
        "a$b",
        "$ne",
        "a*",
        "a#b",
        "a+b",
        "a%2F",
        "q?x=1",
    ],
)
def test_invalid_session_id_strings(sid: str) -> None:
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(sid)


@pytest.mark.parametrize(
    "sid",
    [None, 5, 1.5, b"abc", ["a"], ("a",), {"$ne": None}, {"$gt": ""}, {"$regex": ".*"}, object()],
)
def test_non_str_session_ids_rejected(sid: Any) -> None:
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(sid)


def test_session_id_limits() -> None:
    assert MAX_SESSION_ID_LENGTH == 200


def test_invalid_session_id_error_is_value_error_and_session_error() -> None:
    assert issubclass(InvalidSessionIdError, ValueError)
    assert issubclass(InvalidSessionIdError, SessionError)
    with pytest.raises(ValueError):
        validate_session_id("../x")


# --- §1.5 key order ----------------------------------------------------------------------------


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


# --- §1.5 time format ----------------------------------------------------------------------------


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


# --- §1.5 decode errors ------------------------------------------------------------------------


def test_entry_decode_error_is_value_error() -> None:
    assert issubclass(EntryDecodeError, ValueError)
    assert issubclass(EntryDecodeError, SessionError)


@pytest.mark.parametrize(
    "data",
    ["", "{", "not json", '{"type":"message"', "{'a': 1}", b"\xff\xfe\x00", b'{"type":"\xc3"}'],
)
def test_invalid_json_raises(data: str | bytes) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


@pytest.mark.parametrize("data", ["[]", "[{}]", '"message"', "1", "null", "true"])
def test_non_object_raises(data: str) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(data)


def test_unknown_entry_type_message() -> None:
    with pytest.raises(EntryDecodeError) as info:
        decode_entry('{"type":"bogus",' + HEADER + "}")
    assert 'unknown entry type "bogus"' in str(info.value)


@pytest.mark.parametrize("type_part", ['"type":"session_init",', '"type":"Message",', ""])
def test_other_unknown_or_missing_types_raise(type_part: str) -> None:
    with pytest.raises(EntryDecodeError, match="unknown entry type"):
        decode_entry("{" + type_part + HEADER + ',"summary":"s"}')


@pytest.mark.parametrize(
    "header",
    [
        '"created_at":"2026-01-02T03:04:05Z"',
        '"id":"","created_at":"2026-01-02T03:04:05Z"',
        '"id":null,"created_at":"2026-01-02T03:04:05Z"',
        '"id":7,"created_at":"2026-01-02T03:04:05Z"',
        '"id":"e1"',
        '"id":"e1","created_at":null',
        '"id":"e1","created_at":1767322845',
        '"id":"e1","created_at":"yesterday"',
        '"id":"e1","parent_id":5,"created_at":"2026-01-02T03:04:05Z"',
        '"id":"e1","parent_id":["p"],"created_at":"2026-01-02T03:04:05Z"',
    ],
)
@pytest.mark.parametrize(
    "body",
    [
        '"message":{"role":"user","content":[]}',
        '"summary":"s","first_kept_id":"","tokens_before":0',
        '"kind":"whatever"',
    ],
)
def test_bad_header_raises(header: str, body: str) -> None:
    kind = "message" if "message" in body else "compaction" if "summary" in body else "custom"
    with pytest.raises(EntryDecodeError):
        decode_entry('{"type":"' + kind + '",' + header + "," + body + "}")


def test_unknown_block_type_raises() -> None:
    line = (
        '{"type":"message",' + HEADER + ',"message":{"role":"user",'
        '"content":[{"type":"text","text":"a"},{"type":"hologram","data":"x"}]}}'
    )
    with pytest.raises(EntryDecodeError):
        decode_entry(line)


@pytest.mark.parametrize(
    "message",
    [
        "",
        ',"message":null',
        ',"message":"hi"',
        ',"message":{"content":[]}',
        ',"message":{"role":"system","content":[]}',
        ',"message":{"role":"user","content":"hi"}',
        ',"message":{"role":"user","content":[{"text":"no type"}]}',
        ',"message":{"role":"assistant","stop_reason":"eos"}',
    ],
)
def test_invalid_message_payload_raises(message: str) -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry('{"type":"message",' + HEADER + message + "}")


def test_invalid_compaction_payload_raises() -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry('{"type":"compaction",' + HEADER + ',"summary":"s","tokens_before":"many"}')


def test_null_message_content_decodes_as_empty() -> None:
    e = decode_entry('{"type":"message",' + HEADER + ',"message":{"role":"user","content":null}}')
    assert isinstance(e, MessageEntry)
    assert e.message.content == []
    assert encode_entry(e).endswith('"message":{"role":"user","content":[]}}')


def test_decode_fills_compaction_defaults() -> None:
    e = decode_entry('{"type":"compaction",' + HEADER + ',"summary":"s"}')
    assert e == CompactionEntry(id="e1", created_at=T0, summary="s")


# -- hand-damaged wire data (issue 16.8) -----------------------------------------------------------


@pytest.mark.parametrize("nested_in", ["arguments", "top"])
def test_deeply_nested_wire_is_a_decode_error_not_recursion(nested_in: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    if nested_in == "top":
        wire = deep
    else:
        wire = (
            '{"type":"message","id":"e1","created_at":"2026-01-02T03:04:05Z","message":'
            '{"role":"assistant","content":[{"type":"tool_call","id":"c1","name":"t",'
            '"arguments":{"x":' + deep + "}}]}}"
        )
    with pytest.raises(EntryDecodeError, match="nested too deep"):
        decode_entry(wire)
    with pytest.raises(EntryDecodeError, match="nested too deep"):
        decode_entry(wire.encode())


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    for _ in range(depth):
        root = [root]
    return root


@pytest.mark.parametrize("depth", [MAX_NESTING - 3, MAX_NESTING + 1, 980])
def test_data_nested_past_the_limit_is_refused_and_within_it_kept(depth: int) -> None:
    """Every reader of a stored entry (a store's load, Temporal's payload converter, whose
    parser stops near 200 levels) reads what the codec writes: nesting is capped well below
    their limits, not at whatever depth the encoder's stack reaches (a session holding an entry
    that decodes nowhere could not be loaded again)."""
    entry = CustomEntry(id="c1", created_at=T0, kind="k", tree=_nested(depth))
    if depth <= MAX_NESTING - 2:  # the entry and its ``tree`` key are two levels
        assert decode_entry(encode_entry(entry)) == entry
        return
    with pytest.raises(EntryEncodeError, match=f"nested deeper than {MAX_NESTING}"):
        encode_entry(entry)


class _Blob(CustomEntry):
    """A custom class whose field serializes to JSON only when it holds UTF-8 bytes."""

    data: bytes


class _Score(CustomEntry):
    """A custom class with a float field: NaN and the infinities are floats JSON has not."""

    value: float


@pytest.mark.parametrize(
    "entry",
    [
        CustomEntry(id="c1", created_at=T0, kind="k", blob=b"\x89PNG"),
        CustomEntry(id="c1", created_at=T0, kind="k", tree=_nested(2000)),
        _Blob(id="c1", created_at=T0, kind="blob", data=b"\xff\xfe"),
        _Score(id="c1", created_at=T0, kind="score", value=float("nan")),
        _Score(id="c1", created_at=T0, kind="score", value=float("-inf")),
        CustomEntry(id="c1", created_at=T0, kind="k", rows=[[1.0, float("inf")]]),
    ],
    ids=["bytes", "deep", "non-utf8-bytes-field", "nan-field", "-inf-field", "inf-data"],
)
def test_data_with_no_json_form_is_an_encode_error(entry: CustomEntry) -> None:
    """The codec refuses what JSON cannot hold with its own typed error (a ``SessionError`` and
    ``ValueError`` naming the entry), never a ``TypeError`` or ``RecursionError``."""
    with pytest.raises(EntryEncodeError) as info:
        encode_entry(entry)
    assert isinstance(info.value, SessionError) and isinstance(info.value, ValueError)
    assert info.value.entry_id == "c1" and "'c1'" in str(info.value)
