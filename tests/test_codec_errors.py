"""What the entry codec refuses, with its own typed errors: wire it cannot decode (bad JSON,
unknown types, bad headers and payloads, nesting past the limit) and data JSON cannot hold.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from durable_agent.session import (
    CompactionEntry,
    CustomEntry,
    EntryDecodeError,
    EntryEncodeError,
    MessageEntry,
    SessionError,
    decode_entry,
    encode_entry,
)
from durable_agent.session.codec import MAX_NESTING

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


HEADER = '"id":"e1","created_at":"2026-01-02T03:04:05Z"'


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


def test_an_invalid_payload_is_refused_in_one_line_naming_where() -> None:
    """pydantic's report took four lines and a URL, and a failure's message is shown whole (an
    operator's run input in the Temporal UI, a corrupt line's error in a log): one line, the
    field, what is wrong, how many more."""
    line = '{"type":"message",' + HEADER + ',"message":{"role":"user","content":5}}'
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(line)
    assert str(info.value) == "invalid message entry 'e1': content: Input should be a valid list"
    two = '{"type":"compaction",' + HEADER + ',"summary":5,"tokens_before":"many"}'
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(two)
    assert str(info.value) == (
        "invalid compaction entry 'e1': summary: Input should be a valid string (and 1 more)"
    )
    block = '{"type":"' + "x" * 10_000 + '"}'
    huge = '{"type":"message",' + HEADER + ',"message":{"role":"user","content":[' + block + "]}}"
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(huge)
    assert len(str(info.value)) < 300 and "x" * 60 + "…" in str(info.value), str(info.value)


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
