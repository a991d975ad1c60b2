"""The Anthropic Messages adapter's errors, through the real ``anthropic`` SDK against the replay
server: which failures are retryable, what they say, and that the key never reaches them. (The
failures both adapters meet alike are in ``test_adapter_failures.py``.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agent.ai.providers.anthropic import (
    AnthropicModel,
)

from .adapters import ANTHROPIC_KEY as KEY
from .adapters import anthropic_model, hello
from .conftest import failure, header_values, leaks
from .replay_server import RecordedResponse, ReplayServer

ADAPTER = anthropic_model
"""What the ``model`` fixture builds (the providers' conftest)."""


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


@pytest.mark.parametrize(
    ("error", "retryable", "shown"),
    [
        (
            {"type": "overloaded_error", "message": "Overloaded"},
            True,
            "error in a 200 response overloaded_error: Overloaded",
        ),
        (
            {"type": "invalid_request_error", "message": "max_tokens: must be at most 64000"},
            False,
            "error in a 200 response invalid_request_error: max_tokens: must be at most 64000",
        ),
        ({"message": "upstream failed"}, True, "error in a 200 response: upstream failed"),
        (
            {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
            False,
            "error in a 200 response authentication_error: invalid x-api-key [redacted]",
        ),
    ],
)
async def test_a_200_with_a_json_error_body_is_that_error_with_the_providers_message(
    replay: ReplayServer,
    model: AnthropicModel,
    error: dict[str, Any],
    retryable: bool,
    shown: str,
) -> None:
    # a gateway that answers a failure with a 200 whose body is the API's JSON error object
    replay.enqueue(RecordedResponse.json(200, {"type": "error", "error": error}))

    raised, seen = await failure(model, hello())

    assert str(raised) == f"anthropic: {shown}"
    assert raised.retryable is retryable
    assert leaks(raised, KEY) == []
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
