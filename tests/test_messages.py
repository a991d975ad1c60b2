"""SPEC §1.1: messages, content blocks, usage, wire omission rules and constructors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from durable_agent.ai import (
    ContentBlock,
    Cost,
    FileContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolOutput,
    Usage,
    assistant_message,
    error_tool_result_message,
    tool_result_message,
    user_file_message,
    user_image_message,
    user_message,
)
from durable_agent.session import MessageEntry, decode_entry, encode_entry

T0 = datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)
USAGE_KEYS = [
    "input",
    "output",
    "cache_read",
    "cache_write",
    "reasoning",
    "input_audio",
    "output_audio",
]


def wire(message: Message) -> dict[str, Any]:
    """The message's JSON object exactly as stored."""
    data: dict[str, Any] = json.loads(message.model_dump_json())
    return data


def through_codec(message: Message) -> Message:
    entry = MessageEntry(id="e1", created_at=T0, message=message)
    decoded = decode_entry(encode_entry(entry))
    assert isinstance(decoded, MessageEntry)
    return decoded.message


# --- fields and their values ---------------------------------------------------------------


@pytest.mark.parametrize("role", ["user", "assistant", "tool_result"])
def test_roles_accepted(role: str) -> None:
    assert Message.model_validate({"role": role}).role == role


@pytest.mark.parametrize("role", ["system", "tool", "", "USER"])
def test_other_roles_rejected(role: str) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"role": role})


@pytest.mark.parametrize("reason", ["stop", "length", "tool_use", "error", "aborted"])
def test_stop_reasons_accepted(reason: str) -> None:
    m = Message.model_validate({"role": "assistant", "stop_reason": reason})
    assert m.stop_reason == reason
    assert through_codec(m).stop_reason == reason


def test_unknown_stop_reason_rejected() -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "assistant", "stop_reason": "end_turn"})


def test_messages_and_blocks_are_frozen() -> None:
    m = user_message("hi")
    with pytest.raises(ValidationError):
        m.role = "assistant"  # type: ignore[misc]  # frozen: the assignment must fail
    block = m.content[0]
    assert isinstance(block, TextContent)
    with pytest.raises(ValidationError):
        block.text = "changed"  # type: ignore[misc]  # frozen: the assignment must fail


# --- wire omission -------------------------------------------------------------------------


def test_bare_message_wire_is_role_and_content_only() -> None:
    assert wire(Message(role="user")) == {"role": "user", "content": []}


def test_full_assistant_message_writes_every_field() -> None:
    m = Message(
        role="assistant",
        content=[TextContent(text="x")],
        api="responses",
        provider="openai",
        model="gpt",
        error="boom",
        usage=Usage(input=3),
        stop_reason="error",
        timestamp=T0,
    )
    assert wire(m) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "x"}],
        "api": "responses",
        "provider": "openai",
        "model": "gpt",
        "error": "boom",
        "usage": {"input": 3},
        "stop_reason": "error",
        "timestamp": "2026-01-02T03:04:05.5Z",
    }
    assert through_codec(m) == m


def test_full_tool_result_message_writes_every_field() -> None:
    m = Message(
        role="tool_result",
        content=[TextContent(text="out")],
        tool_call_id="c1",
        tool_name="echo",
        is_error=True,
        timestamp=T0,
    )
    assert wire(m) == {
        "role": "tool_result",
        "content": [{"type": "text", "text": "out"}],
        "tool_call_id": "c1",
        "tool_name": "echo",
        "is_error": True,
        "timestamp": "2026-01-02T03:04:05.5Z",
    }
    assert through_codec(m) == m


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("api", ""),
        ("api", None),
        ("provider", ""),
        ("model", ""),
        ("error", ""),
        ("error", None),
        ("usage", None),
        ("usage", Usage()),
        ("stop_reason", None),
        ("tool_call_id", ""),
        ("tool_name", None),
        ("is_error", False),
        ("timestamp", None),
    ],
)
def test_empty_zero_false_none_fields_are_omitted(field: str, value: Any) -> None:
    m = Message(role="assistant", **{field: value})
    assert wire(m) == {"role": "assistant", "content": []}


def test_role_and_content_are_always_written() -> None:
    data = wire(Message(role="tool_result", content=[]))
    assert list(data) == ["role", "content"]
    assert data["content"] == []


def test_null_content_reads_as_empty_list() -> None:
    m = Message.model_validate({"role": "user", "content": None})
    assert m.content == []
    missing = Message.model_validate({"role": "user"})
    assert missing.content == []


def test_all_zero_usage_is_omitted_and_reads_back_none() -> None:
    # Documented consequence of "omitted when zero": Usage() does not survive as Usage().
    assert through_codec(Message(role="assistant", usage=Usage())).usage is None


def test_usage_writes_only_nonzero_counts_and_costs() -> None:
    u = Usage(output=5, cost=Cost(output=0.25))
    assert json.loads(u.model_dump_json()) == {"output": 5, "cost": {"output": 0.25}}
    assert Usage.model_validate_json(u.model_dump_json()) == u


def test_usage_and_cost_keys() -> None:
    assert [k for k in Usage.model_fields if k != "cost"] == USAGE_KEYS
    assert list(Cost.model_fields) == USAGE_KEYS
    for key in USAGE_KEYS:
        assert Usage.model_fields[key].annotation is int
        assert Cost.model_fields[key].annotation is float
    full = Usage(
        **{k: i + 1 for i, k in enumerate(USAGE_KEYS)},
        cost=Cost(**{k: i + 0.5 for i, k in enumerate(USAGE_KEYS)}),
    )
    m = Message(role="assistant", usage=full)
    assert through_codec(m).usage == full


def test_usage_addition_sums_counts_and_costs() -> None:
    a = Usage(input=1, output=2, cost=Cost(input=0.5))
    b = Usage(input=10, reasoning=3, cost=Cost(input=0.25, output=1.0))
    total = a + b
    assert total == Usage(input=11, output=2, reasoning=3, cost=Cost(input=0.75, output=1.0))


# --- timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z", "2026-01-02", 12345, [], {}])
def test_unparsable_timestamp_reads_as_none(bad: Any) -> None:
    m = Message.model_validate({"role": "user", "timestamp": bad})
    assert m.timestamp is None


def test_unparsable_timestamp_in_stored_entry_reads_as_none() -> None:
    line = (
        '{"type":"message","id":"e1","created_at":"2026-01-02T03:04:05Z",'
        '"message":{"role":"user","content":[],"timestamp":"not a time"}}'
    )
    decoded = decode_entry(line)
    assert isinstance(decoded, MessageEntry)
    assert decoded.message.timestamp is None


def test_out_of_range_timestamp_reads_as_none() -> None:
    # Before year 1 once converted to UTC: unparsable, not an OverflowError.
    m = Message.model_validate({"role": "user", "timestamp": "0001-01-01T00:00:00+01:00"})
    assert m.timestamp is None


def test_timestamp_with_offset_is_normalised_to_utc() -> None:
    m = Message.model_validate({"role": "user", "timestamp": "2026-01-02T05:04:05.5+02:00"})
    assert m.timestamp == T0
    assert m.timestamp is not None and m.timestamp.utcoffset() == timedelta(0)
    assert wire(m)["timestamp"] == "2026-01-02T03:04:05.5Z"


def test_naive_and_foreign_zone_datetimes_are_utc() -> None:
    naive = Message(role="user", timestamp=datetime(2026, 1, 2, 3, 4, 5))
    assert naive.timestamp == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    tokyo = Message(
        role="user", timestamp=datetime(2026, 1, 2, 12, 4, 5, tzinfo=timezone(timedelta(hours=9)))
    )
    assert wire(tokyo)["timestamp"] == "2026-01-02T03:04:05Z"


# --- blocks ------------------------------------------------------------------------------------


def test_text_block_keeps_empty_text_and_drops_missing_signature() -> None:
    assert json.loads(TextContent(text="").model_dump_json()) == {"type": "text", "text": ""}
    signed = TextContent(text="a", signature="sig")
    assert json.loads(signed.model_dump_json()) == {"type": "text", "text": "a", "signature": "sig"}


def test_thinking_signature_survives_store_round_trip() -> None:
    m = assistant_message(ThinkingContent(thinking="hmm", signature="EqQBCkYIARgCIkD"))
    block = through_codec(m).content[0]
    assert isinstance(block, ThinkingContent)
    assert block.thinking == "hmm"
    assert block.signature == "EqQBCkYIARgCIkD"


def test_image_block_wire() -> None:
    img = ImageContent(data="aGVsbG8=", mime_type="image/png")
    assert json.loads(img.model_dump_json()) == {
        "type": "image",
        "data": "aGVsbG8=",
        "mime_type": "image/png",
    }
    with pytest.raises(ValidationError):
        ImageContent.model_validate({"type": "image", "data": "x"})  # mime_type required


@pytest.mark.parametrize(
    "source",
    [{"data": "JVBERi0="}, {"url": "https://example.com/a.pdf"}, {"file_id": "file-123"}],
)
def test_file_block_writes_only_given_fields(source: dict[str, str]) -> None:
    f = FileContent(**source, mime_type="application/pdf", filename="a.pdf")
    assert json.loads(f.model_dump_json()) == {
        "type": "file",
        **source,
        "mime_type": "application/pdf",
        "filename": "a.pdf",
    }
    assert through_codec(user_file_message("see", f)).content[1] == f


def test_tool_call_arguments_omitted_when_empty_and_read_back_empty() -> None:
    call = ToolCall(id="c1", name="now")
    assert json.loads(call.model_dump_json()) == {"type": "tool_call", "id": "c1", "name": "now"}
    assert ToolCall.model_validate({"type": "tool_call", "id": "c1", "name": "now"}).arguments == {}
    nulled = ToolCall.model_validate(
        {"type": "tool_call", "id": "c1", "name": "now", "arguments": None}
    )
    assert nulled.arguments == {}
    back = through_codec(assistant_message(call)).content[0]
    assert isinstance(back, ToolCall)
    assert back.arguments == {}


def test_tool_call_with_every_field_round_trips() -> None:
    call = ToolCall(
        id="srv-1",
        name="web_search",
        arguments={"q": "durable", "n": [1, 2.5, None, True], "nested": {"é": "ü"}},
        signature="s",
        server=True,
        server_type="web_search_call",
        output=ToolOutput(content=[TextContent(text="found")], raw={"hits": 2}, is_error=True),
    )
    assert json.loads(call.model_dump_json()) == {
        "type": "tool_call",
        "id": "srv-1",
        "name": "web_search",
        "arguments": {"q": "durable", "n": [1, 2.5, None, True], "nested": {"é": "ü"}},
        "signature": "s",
        "server": True,
        "server_type": "web_search_call",
        "output": {
            "content": [{"type": "text", "text": "found"}],
            "raw": {"hits": 2},
            "is_error": True,
        },
    }
    assert through_codec(assistant_message(call)).content[0] == call


def test_client_tool_call_omits_server_fields() -> None:
    data = json.loads(ToolCall(id="c", name="n", arguments={"a": 1}).model_dump_json())
    assert "server" not in data
    assert "server_type" not in data
    assert "output" not in data
    assert "signature" not in data


def test_unknown_block_type_is_rejected() -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "content": [{"type": "audio", "data": "x"}]})


def test_block_types_parse_to_their_models() -> None:
    m = Message.model_validate(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "thinking", "thinking": "b"},
                {"type": "image", "data": "x", "mime_type": "image/gif"},
                {"type": "file", "url": "u"},
                {"type": "tool_call", "id": "c", "name": "n"},
            ],
        }
    )
    assert [type(b) for b in m.content] == [
        TextContent,
        ThinkingContent,
        ImageContent,
        FileContent,
        ToolCall,
    ]


# --- text() and tool_calls() ------------------------------------------------------------


def test_text_joins_text_blocks_without_separator() -> None:
    m = assistant_message(
        TextContent(text="Hello"),
        ThinkingContent(thinking="ignored"),
        ToolCall(id="c", name="n"),
        TextContent(text=", world"),
        TextContent(text=""),
        TextContent(text="!"),
    )
    assert m.text() == "Hello, world!"
    assert Message(role="user").text() == ""


def test_tool_calls_lists_all_calls_in_order_server_ones_included() -> None:
    a = ToolCall(id="a", name="x")
    s = ToolCall(id="s", name="search", server=True)
    b = ToolCall(id="b", name="y")
    m = assistant_message(TextContent(text="t"), a, s, b)
    assert m.tool_calls() == [a, s, b]
    assert user_message("no calls").tool_calls() == []


# --- constructors ------------------------------------------------------------------------


def stamped_now(m: Message, before: datetime, after: datetime) -> None:
    assert m.timestamp is not None
    assert m.timestamp.tzinfo is not None
    assert before <= m.timestamp <= after


def test_user_message() -> None:
    before = datetime.now(UTC)
    m = user_message("hi ✓")
    after = datetime.now(UTC)
    assert m.role == "user"
    assert m.content == [TextContent(text="hi ✓")]
    stamped_now(m, before, after)


def test_user_image_message_puts_text_first() -> None:
    i1 = ImageContent(data="AA==", mime_type="image/png")
    i2 = ImageContent(data="AQ==", mime_type="image/jpeg")
    before = datetime.now(UTC)
    m = user_image_message("look", i1, i2)
    after = datetime.now(UTC)
    assert m.role == "user"
    assert m.content == [TextContent(text="look"), i1, i2]
    stamped_now(m, before, after)


def test_user_file_message_puts_text_first() -> None:
    f1 = FileContent(url="https://example.com/x.pdf")
    f2 = FileContent(file_id="file-9", filename="y.txt")
    before = datetime.now(UTC)
    m = user_file_message("read", f1, f2)
    after = datetime.now(UTC)
    assert m.role == "user"
    assert m.content == [TextContent(text="read"), f1, f2]
    stamped_now(m, before, after)


def test_assistant_message() -> None:
    blocks: list[ContentBlock] = [
        ThinkingContent(thinking="t"),
        TextContent(text="a"),
        ToolCall(id="c", name="n"),
    ]
    before = datetime.now(UTC)
    m = assistant_message(*blocks)
    after = datetime.now(UTC)
    assert m.role == "assistant"
    assert m.content == blocks
    assert m.stop_reason is None
    stamped_now(m, before, after)


def test_tool_result_message() -> None:
    before = datetime.now(UTC)
    m = tool_result_message("c1", "echo", TextContent(text="a"), TextContent(text="b"))
    after = datetime.now(UTC)
    assert m.role == "tool_result"
    assert m.tool_call_id == "c1"
    assert m.tool_name == "echo"
    assert m.content == [TextContent(text="a"), TextContent(text="b")]
    assert m.is_error is False
    stamped_now(m, before, after)


def test_error_tool_result_message() -> None:
    before = datetime.now(UTC)
    m = error_tool_result_message("c2", "fetch", "tool execution failed: OSError: down")
    after = datetime.now(UTC)
    assert m.role == "tool_result"
    assert m.tool_call_id == "c2"
    assert m.tool_name == "fetch"
    assert m.is_error is True
    assert m.content == [TextContent(text="tool execution failed: OSError: down")]
    stamped_now(m, before, after)


def test_equal_messages_serialize_identically() -> None:
    a = Message(role="user", content=[TextContent(text="é")], timestamp=T0)
    b = Message(
        role="user",
        content=[TextContent(text="é")],
        timestamp=T0.astimezone(timezone(timedelta(hours=-5))),
    )
    assert a == b
    assert a.model_dump_json() == b.model_dump_json()
