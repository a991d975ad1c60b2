"""The OpenAI Chat Completions adapter's errors, through the real ``openai`` SDK against the replay
server: which failures are retryable, what they say, and that the key never reaches them. (The
failures both adapters meet alike are in ``test_adapter_failures.py``.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agent.ai.providers.openai import OpenAIChatModel

from .adapters import OPENAI_KEY as KEY
from .adapters import hello, openai_model
from .conftest import collect, failure, leaks
from .replay_server import FIXTURES, RecordedResponse, ReplayServer

ADAPTER = openai_model
"""What the ``model`` fixture builds (the providers' conftest)."""


@pytest.mark.parametrize(
    "chunk",
    [
        "null",
        "[1, 2]",
        '{"choices": "abc"}',
        '{"choices": [{"index": 0, "delta": "x", "finish_reason": null}]}',
        '{"choices": [{"index": 0, "delta": {"content": 5}, "finish_reason": null}]}',
        '{"choices": [], "usage": "lots"}',
    ],
    ids=["null", "a list", "choices text", "delta text", "content a number", "usage text"],
)
async def test_json_that_is_no_chunk_is_a_model_error(
    replay: ReplayServer, model: OpenAIChatModel, chunk: str
) -> None:
    # A compatible server or proxy sending JSON of another shape: a typed, final error naming
    # the mismatch, never an AttributeError or TypeError out of the adapter.
    first = '{"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}'
    body = f"data: {first}\n\ndata: {chunk}\n\ndata: [DONE]\n\n".encode()
    replay.enqueue(RecordedResponse(200, "OK", (("content-type", "text/event-stream"),), body))

    error, _ = await failure(model, hello())

    assert not error.retryable
    assert str(error).startswith("openai: response did not match the API schema (")
    assert error.__cause__ is None and error.__context__ is None


async def test_a_200_that_is_no_event_stream_is_a_lasting_error_that_says_so(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    # base_url naming a web app that answers every path with its page (a single-page app's
    # fallback): no retry mends it, and "the stream ended early" would send the user astray
    page = b"<!doctype html><html><head><title>Chat UI</title></head><body></body></html>"
    replay.enqueue(RecordedResponse(200, "OK", (("content-type", "text/html"),), page))

    error, seen = await failure(model, hello())

    assert not error.retryable
    assert str(error) == (
        "openai: the server answered 200 with text/html, not an event stream "
        "(is base_url the API's?)"
    )
    assert seen == ["start"]


@pytest.mark.parametrize(
    ("error", "retryable", "shown"),
    [
        # OpenAI's own shapes, as a gateway (LiteLLM, an Azure front) passes them on with a 200
        (
            {"message": "The server had an error", "type": "server_error", "code": None},
            True,
            "error in a 200 response server_error: The server had an error",
        ),
        (
            {"message": "model 'gpt-5x' not found", "type": "invalid_request_error"},
            False,
            "error in a 200 response invalid_request_error: model 'gpt-5x' not found",
        ),
        # the HTTP status it stands for as ``code`` (LiteLLM sends it as text)
        (
            {"message": "Rate limit exceeded", "type": "throttled", "code": "429"},
            True,
            "error in a 200 response throttled: Rate limit exceeded",
        ),
        ({"message": "bad gateway", "code": 502}, True, "error in a 200 response 502: bad gateway"),
        (
            {"message": "You exceeded your current quota", "type": "insufficient_quota"},
            False,
            "error in a 200 response insufficient_quota: You exceeded your current quota",
        ),
        (
            {"message": f"Incorrect API key provided: {KEY}.", "code": "invalid_api_key"},
            False,
            "error in a 200 response invalid_api_key: Incorrect API key provided: [redacted].",
        ),
    ],
)
async def test_a_200_with_a_json_error_body_is_that_error_with_the_providers_message(
    replay: ReplayServer,
    model: OpenAIChatModel,
    error: dict[str, Any],
    retryable: bool,
    shown: str,
) -> None:
    # Some gateways answer a failure with a 200 whose body is the API's JSON error object, not
    # an event stream: the provider's message is what tells the user what went wrong.
    replay.enqueue(RecordedResponse.json(200, {"error": error}))

    raised, seen = await failure(model, hello())

    assert str(raised) == f"openai: {shown}"
    assert raised.retryable is retryable
    assert leaks(raised, KEY) == []
    assert seen == ["start"]


async def test_a_stream_sent_as_application_json_is_still_read_as_a_stream(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    # a server that labels its event stream application/json: it streamed before, and still does
    ok = RecordedResponse.load(FIXTURES / "openai/text.http")
    headers = tuple((k, "application/json" if k == "content-type" else v) for k, v in ok.headers)
    replay.enqueue(RecordedResponse(200, "OK", headers, ok.body))

    events = await collect(model, hello())

    assert events[-1].type == "done" and events[-1].partial.stop_reason == "stop"


async def test_an_error_inside_the_stream_is_retryable_when_the_server_failed(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/stream_error.http")

    error, _ = await failure(model, hello())

    assert error.retryable
    assert str(error).startswith("openai: error in stream server_error: The server had an error")


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        # vLLM, when generation fails after the 200 (its GenerationError)
        ({"type": "InternalServerError", "code": 500}, True),
        # llama.cpp while its model loads
        ({"type": "unavailable_error", "code": 503}, True),
        # vLLM and llama.cpp refusing the request itself
        ({"type": "BadRequestError", "code": 400}, False),
        ({"type": "exceed_context_size_error", "code": 400}, False),
    ],
)
async def test_an_error_in_the_stream_with_an_http_code_is_retryable_as_that_status(
    replay: ReplayServer, model: OpenAIChatModel, error: dict[str, Any], retryable: bool
) -> None:
    # Compatible servers send a failure after the 200 as ``data: {"error": {...}}`` whose
    # ``code`` is the HTTP status it stands for and whose type is their own name for it.
    failure_chunk = {"error": {"message": "generation failed", "param": None, **error}}
    body = f"data: {json.dumps(failure_chunk)}\n\n".encode()
    replay.enqueue(RecordedResponse(200, "OK", (("content-type", "text/event-stream"),), body))

    raised, _ = await failure(model, hello())

    assert raised.retryable is retryable
    assert str(raised) == f"openai: error in stream {error['type']}: generation failed"


async def test_an_exhausted_quota_is_final_though_it_is_a_429(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    """Billing, not load: OpenAI answers 429 ``insufficient_quota`` until someone pays, so
    retrying only spends the run's attempts (and its user's wait) before failing anyway."""
    replay.enqueue("openai/insufficient_quota.http")

    error, seen = await failure(model, hello())

    assert not error.retryable and error.retry_after is None
    assert str(error).startswith("openai: HTTP 429 insufficient_quota: You exceeded your current")
    assert seen == []


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        *[(400, False), (401, False), (403, False), (404, False), (422, False)],
        *[(408, True), (409, True), (500, True), (502, True), (503, True)],
    ],
)
async def test_status_codes_map_to_retryable_and_the_sdk_does_not_retry(
    replay: ReplayServer, model: OpenAIChatModel, status: int, retryable: bool
) -> None:
    body = {"error": {"message": f"status {status}", "type": "test_error", "code": None}}
    replay.enqueue(RecordedResponse.json(status, body))

    error, _ = await failure(model, hello())

    assert error.retryable is retryable
    assert str(error) == f"openai: HTTP {status} test_error: status {status}"
    assert len(replay.requests) == 1  # max_retries=0: the retry decision is the caller's


async def test_an_echoed_key_never_reaches_the_error(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/unauthorized_echo.http")

    error, _ = await failure(model, hello())

    assert KEY in replay.requests[0].headers["authorization"]  # the key was really in play
    assert not error.retryable
    assert leaks(error, KEY) == []
    assert error.__cause__ is None and error.__context__ is None
    assert "Incorrect API key provided: [redacted]" in str(error)
    assert KEY not in repr(model)


async def test_a_key_of_any_shape_is_redacted(replay: ReplayServer) -> None:
    secret = "local-canary-credential-4242"
    echo: dict[str, Any] = {
        "error": {"message": f"bad key {secret}; sent Authorization: Bearer {secret}"}
    }
    replay.enqueue(RecordedResponse.json(403, echo))
    lm = OpenAIChatModel("m", api_key=secret, base_url=f"{replay.url}/v1")

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert replay.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert leaks(error, secret) == []
    assert str(error) == (
        "openai: HTTP 403: bad key [redacted]; sent Authorization: Bearer [redacted]"
    )
