"""The Anthropic Messages adapter, through the real ``anthropic`` SDK against the replay server.

Each test queues recorded responses, makes real calls over a socket, and asserts both what the
adapter sent (the request body the server received) and what it made of the reply.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_agent.ai import (
    FileContent,
    Message,
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    tool_result_message,
    user_message,
)
from durable_agent.ai.providers.anthropic import (
    REDACTED_THINKING_PREFIX,
    AnthropicModel,
    to_anthropic_messages,
)

from .conftest import collect, failure, leaks
from .history import PDF, PNG, SIGNATURE, SYSTEM, TOOLS, history, repaired_request
from .replay_server import RecordedResponse, ReplayServer

KEY = "sk-ant-canary-7f3a9c2e1b8d4f60a5e7"
"""The key every test uses; the 401 fixture (a gateway) echoes it back."""

STREAMED_THINKING = "The user wants the weather in Paris and the local time. I'll call both tools."
STREAMED_SIGNATURE = (
    "EqQBCkYIBxgCKkCzAYZIjLm9Hl8QeV3u1cYd0FkTqPbWd6sYRj0aH7LzUoGvN2mXhK4tJ9cQrE1wS5uIpA8nB3fD6gM2y"
    "ZxAEgwVb7nQpT3kLm9sR4cYBSIMx9wq2Ez5aFhJ3kTuIjD0pWqR8vN1cL6mY4bS7hX2eKz9gA=="
)
REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8URj"
    "2pLmKQ=="
)


@pytest.fixture
async def model(replay: ReplayServer) -> AsyncIterator[AnthropicModel]:
    lm = AnthropicModel("claude-sonnet-4-6", api_key=KEY, base_url=replay.url, timeout=10)
    yield lm
    await lm.aclose()


def hello() -> ModelRequest:
    return ModelRequest(messages=[user_message("Say hello")])


def header_values(headers: dict[str, str]) -> str:
    return "\n".join(headers.values())


# -- requests ------------------------------------------------------------------------------------


async def test_request_converts_the_repaired_history_tools_and_options(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/text.http")
    thinking = {"type": "enabled", "budget_tokens": 2048}
    request = repaired_request(
        "anthropic-messages", call_ids=("toolu_1", "toolu_2"), max_tokens=4096, thinking=thinking
    )

    await collect(model, request)

    [sent] = replay.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert KEY in header_values(sent.headers)
    assert sent.headers["x-stainless-retry-count"] == "0"
    assert sent.json() == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "stream": True,
        "system": SYSTEM,
        "thinking": thinking,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    # Sent back exactly, signature included: the API verifies it.
                    {
                        "type": "thinking",
                        "thinking": "A cat. Check the weather too.",
                        "signature": SIGNATURE,
                    },
                    {"type": "text", "text": "A cat. Checking the weather."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "get_time",
                        "input": {"tz": "Europe/Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18°C, cloudy"}],
                    },
                    # The dangling call, answered by repair_tool_calls (SPEC §5.1).
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "tool execution interrupted"}],
                        "is_error": True,
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarise this report too."},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
                        "title": "report.pdf",
                    },
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": TOOLS[0].parameters,
            },
            {"name": "get_time", "input_schema": TOOLS[1].parameters},
        ],
    }


async def test_max_tokens_defaults_and_system_is_omitted_when_empty(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/text.http")

    await collect(model, hello())

    assert replay.requests[0].json() == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8192,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}],
    }


async def test_options_may_not_override_what_the_adapter_owns(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    error, seen = await failure(model, ModelRequest(options={"system": "x"}))

    assert not error.retryable and "['system']" in str(error)
    assert seen == [] and replay.requests == []


def test_thinking_from_another_api_or_unsigned_is_not_sent() -> None:
    foreign = to_anthropic_messages(history("openai-chat", call_ids=("a", "b")))
    unsigned = Message(
        role="assistant",
        content=[ThinkingContent(thinking="no signature"), TextContent(text="hi")],
        api="anthropic-messages",
    )

    assert [b["type"] for b in foreign[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert to_anthropic_messages([unsigned]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    ]


def test_a_conversation_ending_on_a_cut_reply_sends_it_without_trailing_whitespace() -> None:
    """Going on from a reply cut short sends it last (the API reads it as the start of its
    answer), and the API refuses a final assistant message ending in whitespace, as a reply cut
    between two words does; a reply left with nothing is not sent. Earlier replies are sent
    as they are."""
    question = Message(role="user", content=[TextContent(text="count")])
    earlier = Message(role="assistant", content=[TextContent(text="one ")])
    cut = Message(role="assistant", content=[TextContent(text="two\n"), TextContent(text=" \t")])
    blank = Message(role="assistant", content=[TextContent(text="  ")])

    sent = to_anthropic_messages([question, earlier, question, cut])
    assert sent[1]["content"] == [{"type": "text", "text": "one "}]
    assert sent[-1] == {"role": "assistant", "content": [{"type": "text", "text": "two"}]}
    assert to_anthropic_messages([question, blank]) == [to_anthropic_messages([question])[0]]


def test_documents_by_url_file_id_and_plain_text() -> None:
    text = base64.b64encode("notes ✓".encode()).decode()
    message = Message(
        role="user",
        content=[
            FileContent(url="https://example.com/a.pdf"),
            FileContent(file_id="file_011"),
            FileContent(data=text, mime_type="text/plain", filename="notes.txt"),
        ],
    )

    [converted] = to_anthropic_messages([message])

    assert converted["content"] == [
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_011"}},
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "notes ✓"},
            "title": "notes.txt",
        },
    ]


# -- responses -----------------------------------------------------------------------------------


async def test_streams_text_with_accumulated_partials_then_usage_with_cache(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/text.http")

    events = await collect(model, hello())

    assert [e.type for e in events] == ["start", "text_delta", "text_delta", "text_delta", "done"]
    assert [e.partial.text() for e in events[1:4]] == ["Hello", "Hello, world", "Hello, world!"]
    done = events[-1].message
    assert done.content == [TextContent(text="Hello, world!")]
    assert done.usage == Usage(input=412, output=9, cache_read=2048)
    assert (done.api, done.provider, done.model, done.stop_reason) == (
        "anthropic-messages",
        "anthropic",
        "claude-sonnet-4-6",
        "stop",
    )
    assert done.timestamp is not None and done.error is None


async def test_streams_thinking_with_signature_text_and_tool_calls(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/thinking_tool_use.http")

    events = await collect(model, hello())

    assert [(e.type, e.index) for e in events[1:-1]] == [
        ("thinking_delta", 0),
        ("thinking_delta", 0),
        ("text_delta", 1),
        ("tool_call_delta", 2),
        ("tool_call_delta", 2),
        ("tool_call_delta", 2),
        ("tool_call_delta", 3),
        ("tool_call_delta", 3),
    ]
    assert "".join(e.delta for e in events if e.index == 2) == '{"city": "Paris"}'
    assert events[5].partial.tool_calls()[0].arguments == {"city": "Pa"}
    done = events[-1].message
    assert done.content == [
        ThinkingContent(thinking=STREAMED_THINKING, signature=STREAMED_SIGNATURE),
        TextContent(text="Let me check both."),
        ToolCall(
            id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", arguments={"city": "Paris"}
        ),
        ToolCall(
            id="toolu_01Hq7Vb3Nc5Xm8Zk2Lp4Rt9Y", name="get_time", arguments={"tz": "Europe/Paris"}
        ),
    ]
    assert done.stop_reason == "tool_use"
    assert done.usage == Usage(input=1873, output=143, cache_write=1536, reasoning=61)


async def test_a_parsed_reply_goes_back_with_its_signature(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/thinking_tool_use.http", "anthropic/text.http")
    reply = (await collect(model, hello()))[-1].message
    # Through the wire form, as a store keeps it.
    stored = Message.model_validate_json(reply.model_dump_json())
    results = [
        tool_result_message(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", TextContent(text="18°C")
        ),
        tool_result_message(
            "toolu_01Hq7Vb3Nc5Xm8Zk2Lp4Rt9Y", "get_time", TextContent(text="14:03")
        ),
    ]

    await collect(model, ModelRequest(messages=[user_message("Say hello"), stored, *results]))

    sent = replay.requests[1].json()["messages"]
    assert sent[1]["content"][0] == {
        "type": "thinking",
        "thinking": STREAMED_THINKING,
        "signature": STREAMED_SIGNATURE,
    }
    assert [b["type"] for b in sent[1]["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == [
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "toolu_01Hq7Vb3Nc5Xm8Zk2Lp4Rt9Y",
    ]


async def test_redacted_thinking_is_kept_and_sent_back_unchanged(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/redacted_thinking.http", "anthropic/text.http")
    reply = (await collect(model, hello()))[-1].message

    await collect(
        model, ModelRequest(messages=[user_message("Say hello"), reply, user_message("ok")])
    )

    assert reply.content == [
        ThinkingContent(thinking="", signature=REDACTED_THINKING_PREFIX + REDACTED_DATA),
        TextContent(text="Done."),
    ]
    assert replay.requests[1].json()["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": REDACTED_DATA},
        {"type": "text", "text": "Done."},
    ]


@pytest.mark.parametrize(
    ("fixture", "stop", "error"),
    [
        ("anthropic/text.http", "stop", None),
        ("anthropic/thinking_tool_use.http", "tool_use", None),
        ("anthropic/max_tokens.http", "length", None),
        (
            "anthropic/refusal.http",
            "error",
            "anthropic: stop_reason refusal: The request could enable malware development.",
        ),
    ],
)
async def test_stop_reasons_map(
    replay: ReplayServer, model: AnthropicModel, fixture: str, stop: str, error: str | None
) -> None:
    replay.enqueue(fixture)

    done = (await collect(model, hello()))[-1].message

    assert (done.stop_reason, done.error) == (stop, error)


async def test_tool_input_cut_by_max_tokens_keeps_what_parses(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/max_tokens.http")

    done = (await collect(model, hello()))[-1].message

    assert done.tool_calls() == [
        ToolCall(
            id="toolu_01Mx", name="write_file", arguments={"path": "notes.txt", "text": "first li"}
        )
    ]


# -- failures ------------------------------------------------------------------------------------


async def test_a_malformed_stream_fails_retryably(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/malformed.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == "anthropic: malformed stream: an event is not valid JSON"
    assert seen == ["start", "text_delta"]


async def test_a_stream_cut_mid_message_fails_retryably(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/cut.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == "anthropic: connection failed (RemoteProtocolError)"
    assert seen == ["start", "text_delta"]


async def test_a_stream_that_ends_before_message_stop_fails_retryably(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/ended_early.http")

    error, seen = await failure(model, hello())

    assert error.retryable and str(error) == "anthropic: stream ended before message_stop"
    assert seen == ["start", "text_delta"]


async def test_a_200_that_is_no_event_stream_is_a_lasting_error_that_says_so(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    # a proxy that ignores "stream": true and answers the whole message as JSON
    whole = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    replay.enqueue(RecordedResponse.json(200, whole))

    error, seen = await failure(model, hello())

    assert not error.retryable
    assert str(error) == (
        "anthropic: the server answered 200 with application/json, not an event stream "
        "(is base_url the API's?)"
    )
    assert seen == ["start"]


async def test_an_overloaded_error_inside_the_stream_is_retryable(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/overloaded_in_stream.http")

    error, seen = await failure(model, hello())

    assert error.retryable and error.retry_after is None
    assert str(error) == "anthropic: error in stream overloaded_error: Overloaded"
    assert seen == ["start"]


@pytest.mark.parametrize(
    "data", ['{"type":"error","error":{"message":"Internal"}}', '{"type":"error"}', "oops"]
)
async def test_an_error_inside_the_stream_that_names_no_type_is_retryable(
    replay: ReplayServer, model: AnthropicModel, data: str
) -> None:
    """After a 200 the request was taken: an error event that says no more than that is the
    server's, retried (as the OpenAI adapter does); only a named type of the request's is final."""
    start = (
        'event: message_start\ndata: {"type":"message_start","message":{"model":"m","id":"x",'
        '"type":"message","role":"assistant","content":[],"stop_reason":null,'
        '"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
    )
    body = f"{start}event: error\ndata: {data}\n\n".encode()
    replay.enqueue(RecordedResponse(200, "OK", (("content-type", "text/event-stream"),), body))

    error, _ = await failure(model, hello())

    assert error.retryable, str(error)


async def test_rate_limit_then_success(replay: ReplayServer, model: AnthropicModel) -> None:
    replay.enqueue("anthropic/rate_limited.http", "anthropic/text.http")

    error, seen = await failure(model, hello())
    events = await collect(model, hello())

    assert error.retryable and error.retry_after == 7.0
    assert str(error).startswith("anthropic: HTTP 429 rate_limit_error: This request would exceed")
    assert seen == []
    assert events[-1].message.text() == "Hello, world!"
    first, second = replay.requests
    assert first.json() == second.json()


async def test_overloaded_529_is_retryable(replay: ReplayServer, model: AnthropicModel) -> None:
    replay.enqueue("anthropic/overloaded.http")

    error, _ = await failure(model, hello())

    assert error.retryable and str(error) == "anthropic: HTTP 529 overloaded_error: Overloaded"
    assert len(replay.requests) == 1


async def test_a_proxys_plain_text_error_body_is_the_detail(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    text = b"upstream connect error or disconnect/reset before headers. reset reason: overflow"
    replay.enqueue(RecordedResponse(502, "Bad Gateway", (("content-type", "text/plain"),), text))

    error, _ = await failure(model, hello())

    assert error.retryable
    assert str(error) == f"anthropic: HTTP 502: {text.decode()}"


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, "invalid_request_error", False),
        (401, "authentication_error", False),
        (403, "permission_error", False),
        (404, "not_found_error", False),
        (413, "request_too_large", False),
        (429, "rate_limit_error", True),
        (500, "api_error", True),
        (503, "api_error", True),
    ],
)
async def test_status_codes_map_to_retryable_and_the_sdk_does_not_retry(
    replay: ReplayServer, model: AnthropicModel, status: int, kind: str, retryable: bool
) -> None:
    body = {"type": "error", "error": {"type": kind, "message": f"status {status}"}}
    replay.enqueue(RecordedResponse.json(status, body))

    error, _ = await failure(model, hello())

    assert error.retryable is retryable
    assert str(error) == f"anthropic: HTTP {status} {kind}: status {status}"
    assert len(replay.requests) == 1  # max_retries=0: the retry decision is the caller's


async def test_x_should_retry_overrides_the_status(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "do not retry this"}}
    replay.enqueue(RecordedResponse.json(500, body, headers={"x-should-retry": "false"}))

    error, _ = await failure(model, hello())

    assert not error.retryable


async def test_a_timeout_is_retryable(replay: ReplayServer) -> None:
    replay.enqueue(RecordedResponse(200, "OK", (), b"", hang=True))
    lm = AnthropicModel("claude-sonnet-4-6", api_key=KEY, base_url=replay.url, timeout=0.2)

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == "anthropic: request timed out"


_START = {
    "type": "message_start",
    "message": {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
}
_TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
_TOOL = {"type": "tool_use", "id": "toolu_1", "name": "get_time"}


@pytest.mark.parametrize(
    "events",
    [
        [{"type": "message_start"}],
        [_START, {"type": "message_delta"}],
        [_START, {**_TEXT_START, "content_block": {"type": "text", "text": None}}],
        [
            _START,
            {**_TEXT_START, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
        ],
        [_START, {**_TEXT_START, "content_block": {**_TOOL, "input": "now"}}],
        [_START, {**_TEXT_START, "content_block": {"type": "tool_use", "name": "f", "input": {}}}],
        [_START, [1]],
    ],
    ids=[
        "start without message",
        "delta without delta",
        "text block with null text",
        "text delta without text",
        "tool input text",
        "tool without id",
        "a list",
    ],
)
async def test_json_that_is_no_event_is_a_model_error(
    replay: ReplayServer, model: AnthropicModel, events: list[Any]
) -> None:
    # A compatible gateway sending events of another shape: a typed, final error naming the
    # mismatch, never an AttributeError, TypeError or pydantic error out of the adapter.
    stop = [
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    ]
    body = "".join(
        f"event: {e['type'] if isinstance(e, dict) else 'content_block_delta'}\n"
        f"data: {json.dumps(e)}\n\n"
        for e in [*events, *stop]
    )
    headers = (("content-type", "text/event-stream"),)
    replay.enqueue(RecordedResponse(200, "OK", headers, body.encode()))

    error, _ = await failure(model, hello())

    assert not error.retryable
    assert str(error).startswith("anthropic: response did not match the API schema (")
    assert error.__cause__ is None and error.__context__ is None


async def test_a_refused_connection_is_retryable(closed_port: int) -> None:
    lm = AnthropicModel("m", api_key=KEY, base_url=f"http://127.0.0.1:{closed_port}")

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == "anthropic: connection failed (ConnectError)"


# -- secrets ----------------------------------------------------------------------------------


async def test_an_echoed_key_never_reaches_the_error(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/unauthorized_echo.http")

    error, _ = await failure(model, hello())

    assert KEY in header_values(replay.requests[0].headers)  # the key was really in play
    assert not error.retryable
    assert leaks(error, KEY) == []
    assert error.__cause__ is None and error.__context__ is None
    assert str(error) == (
        "anthropic: HTTP 401 authentication_error: invalid x-api-key: [redacted] "
        "(header authorization: Bearer [redacted])"
    )
    assert KEY not in repr(model)
