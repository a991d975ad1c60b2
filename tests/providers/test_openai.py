"""The OpenAI Chat Completions adapter, through the real ``openai`` SDK against the replay server.

Each test queues recorded responses, makes real calls over a socket, and asserts both what the
adapter sent (the request body the server received) and what it made of the reply.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_agent.ai import (
    FileContent,
    ImageContent,
    Message,
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    tool_result_message,
    user_message,
)
from durable_agent.ai.providers.openai import OpenAIChatModel, to_openai_messages

from .conftest import collect, failure, leaks
from .history import PDF, PNG, SYSTEM, TOOLS, repaired_request
from .replay_server import RecordedResponse, ReplayServer

KEY = "sk-canary-7f3a9c2e1b8d4f60a5e7"
"""The key every test uses; the 401 fixture echoes it back, as OpenAI does."""


@pytest.fixture
async def model(replay: ReplayServer) -> AsyncIterator[OpenAIChatModel]:
    lm = OpenAIChatModel("gpt-4.1-mini", api_key=KEY, base_url=f"{replay.url}/v1", timeout=10)
    yield lm
    await lm.aclose()


def hello() -> ModelRequest:
    return ModelRequest(messages=[user_message("Say hello")])


# -- requests ------------------------------------------------------------------------------------


async def test_request_converts_the_repaired_history_tools_and_options(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/text.http")
    request = repaired_request("openai-chat", call_ids=("call_1", "call_2"), temperature=0.2)

    await collect(model, request)

    [sent] = replay.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["x-stainless-retry-count"] == "0"
    assert sent.json() == {
        "model": "gpt-4.1-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this picture?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            {
                # Thinking is not sent back: Chat Completions takes no reasoning input.
                "role": "assistant",
                "content": "A cat. Checking the weather.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C, cloudy"},
            # The dangling call, answered by repair_tool_calls (SPEC §5.1) as an error result.
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": "Error: tool execution interrupted",
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarise this report too."},
                    {
                        "type": "file",
                        "file": {
                            "file_data": f"data:application/pdf;base64,{PDF}",
                            "filename": "report.pdf",
                        },
                    },
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": TOOLS[0].parameters,
                },
            },
            {
                "type": "function",
                "function": {"name": "get_time", "parameters": TOOLS[1].parameters},
            },
        ],
    }


async def test_options_may_not_override_what_the_adapter_owns(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    error, seen = await failure(model, ModelRequest(options={"stream": False, "model": "x"}))

    assert not error.retryable
    assert "['model', 'stream']" in str(error)
    assert seen == [] and replay.requests == []


async def test_a_file_given_by_url_is_refused_before_any_request(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    message = Message(role="user", content=[FileContent(url="https://example.com/a.pdf")])

    error, _ = await failure(model, ModelRequest(messages=[message]))

    assert not error.retryable and "URL" in str(error)
    assert replay.requests == []


def test_images_from_tool_results_follow_the_results_in_one_user_message() -> None:
    image = ImageContent(data=PNG, mime_type="image/png")
    messages = [
        Message(
            role="assistant", content=[ToolCall(id="a", name="shot"), ToolCall(id="b", name="x")]
        ),
        tool_result_message("a", "shot", TextContent(text="captured"), image),
        tool_result_message("b", "x", TextContent(text="one"), TextContent(text="two")),
        user_message("and now?"),
    ]

    converted = to_openai_messages("", messages, system_role="developer")

    assert [m["role"] for m in converted] == ["assistant", "tool", "tool", "user", "user"]
    assert converted[2]["content"] == "one\ntwo"
    assert converted[3]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ]
    assert converted[4] == {"role": "user", "content": "and now?"}
    assert to_openai_messages("be brief", [], system_role="developer") == [
        {"role": "developer", "content": "be brief"}
    ]


def test_empty_assistant_messages_and_server_calls_are_left_out() -> None:
    messages = [
        user_message("hi"),
        Message(role="assistant", content=[], stop_reason="error", error="boom"),
        Message(
            role="assistant",
            content=[
                ThinkingContent(thinking="hidden"),
                ToolCall(id="srv", name="web_search", server=True),
                TextContent(text="ok"),
            ],
        ),
    ]

    assert to_openai_messages("", messages) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok"},
    ]


# -- responses -----------------------------------------------------------------------------------


async def test_streams_text_with_accumulated_partials_then_usage_with_cache(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/text.http")

    events = await collect(model, hello())

    assert [e.type for e in events] == ["start", "text_delta", "text_delta", "text_delta", "done"]
    assert [e.delta for e in events[1:4]] == ["Hello", ", world", "!"]
    assert [e.partial.text() for e in events[1:4]] == ["Hello", "Hello, world", "Hello, world!"]
    done = events[-1].message
    assert done.content == [TextContent(text="Hello, world!")]
    # 1536 prompt tokens of which 1280 were cached: input counts only the uncached ones.
    assert done.usage == Usage(input=256, output=9, cache_read=1280)
    assert done.stop_reason == "stop"
    assert (done.role, done.api, done.provider, done.model) == (
        "assistant",
        "openai-chat",
        "openai",
        "gpt-4.1-mini",
    )
    assert done.timestamp is not None and done.error is None


async def test_streams_tool_call_arguments_and_assembles_them(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/tool_calls.http")

    events = await collect(model, hello())

    deltas = [e for e in events if e.type == "tool_call_delta"]
    by_index: dict[int, str] = {}
    for e in deltas:
        by_index[e.index] = by_index.get(e.index, "") + e.delta
    assert by_index == {0: '{"city": "Paris"}', 1: '{"tz": "Europe/Paris"}'}
    # Partials show the arguments parsed as far as they go, an unfinished string included.
    third = deltas[2].partial.tool_calls()[0]
    assert (third.id, third.name, third.arguments) == ("call_Wx7kQ2", "get_weather", {"city": "Pa"})
    done = events[-1].message
    assert done.content == [
        ToolCall(id="call_Wx7kQ2", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_Pz4mR9", name="get_time", arguments={"tz": "Europe/Paris"}),
    ]
    assert done.stop_reason == "tool_use"
    assert done.usage == Usage(input=212, output=58)


async def test_a_parsed_reply_goes_back_as_the_next_request_history(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/tool_calls.http", "openai/text.http")
    first = await collect(model, hello())
    reply = first[-1].message
    results = [
        tool_result_message("call_Wx7kQ2", "get_weather", TextContent(text="18°C")),
        tool_result_message("call_Pz4mR9", "get_time", TextContent(text="14:03")),
    ]

    await collect(model, ModelRequest(messages=[user_message("Say hello"), reply, *results]))

    assert replay.requests[1].json()["messages"][1:] == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_Wx7kQ2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_Pz4mR9",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_Wx7kQ2", "content": "18°C"},
        {"role": "tool", "tool_call_id": "call_Pz4mR9", "content": "14:03"},
    ]


async def test_calls_sent_whole_at_one_index_stay_separate_and_stop_means_tool_use(
    replay: ReplayServer,
) -> None:
    """A compatible server (Ollama-style) that sends each call complete, all at index 0, and
    finishes with "stop" rather than "tool_calls"."""
    replay.enqueue("openai/whole_calls_at_index_0.http")
    lm = OpenAIChatModel("qwen3:8b", provider="ollama", api_key="x", base_url=f"{replay.url}/v1")

    done = (await collect(lm, hello()))[-1].message
    await lm.aclose()

    assert done.content == [
        ToolCall(id="call_k2x9w1ab", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_7hq3m0zd", name="get_time", arguments={"tz": "Europe/Paris"}),
    ]
    assert (done.stop_reason, done.usage) == ("tool_use", Usage(input=160, output=38))


@pytest.mark.parametrize(
    ("fixture", "stop", "error"),
    [
        ("openai/text.http", "stop", None),
        ("openai/length.http", "length", None),
        ("openai/tool_calls.http", "tool_use", None),
        ("openai/content_filter.http", "error", "openai: finish_reason content_filter"),
    ],
)
async def test_finish_reasons_map_to_stop_reasons(
    replay: ReplayServer, model: OpenAIChatModel, fixture: str, stop: str, error: str | None
) -> None:
    replay.enqueue(fixture)

    done = (await collect(model, hello()))[-1].message

    assert (done.stop_reason, done.error) == (stop, error)


async def test_a_refusal_is_a_reply_that_says_so_not_an_answer(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    # OpenAI streams a refusal in ``delta.refusal`` (content null) and finishes with "stop": the
    # text is shown, but the reply ends the run marked as refused, as Anthropic's refusal does,
    # rather than passing for an answer (a structured-output caller would parse it as one).
    replay.enqueue("openai/refusal.http")

    events = await collect(model, hello())

    refused = "I'm sorry, I can't help with that request."
    assert "".join(e.delta for e in events if e.type == "text_delta") == refused
    done = events[-1].message
    assert done.content == [TextContent(text=refused)]
    assert (done.stop_reason, done.error) == ("error", f"openai: refusal: {refused}")
    assert done.usage == Usage(input=52, output=11)


async def test_reasoning_from_a_compatible_server_becomes_thinking(replay: ReplayServer) -> None:
    replay.enqueue("openai/reasoning_vllm.http")
    lm = OpenAIChatModel("Qwen/Qwen3-8B", provider="vllm", api_key="x", base_url=f"{replay.url}/v1")

    events = await collect(lm, hello())
    await lm.aclose()

    assert [(e.type, e.index) for e in events[1:-1]] == [
        ("thinking_delta", 0),
        ("thinking_delta", 0),
        ("text_delta", 1),
    ]
    done = events[-1].message
    assert done.content == [
        ThinkingContent(thinking="The user greets me. Reply briefly."),
        TextContent(text="Hi there."),
    ]
    assert (done.provider, done.usage, done.stop_reason) == ("vllm", Usage(), "stop")


async def test_annotation_only_chunks_of_azures_async_filter_are_skipped(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    # Azure OpenAI's asynchronous content filter sends choices with no ``delta`` at all, only
    # filter annotations (one of them after finish_reason): nothing to show, not a failure.
    replay.enqueue("openai/azure_async_filter.http")

    events = await collect(model, hello())

    assert [e.delta for e in events if e.type == "text_delta"] == ["Color", " is light."]
    done = events[-1].message
    assert (done.content, done.stop_reason) == ([TextContent(text="Color is light.")], "stop")


async def test_usage_with_null_counts_reads_as_zero(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    # Some compatible servers (Databricks model serving, for one) send the usage chunk with
    # null counts: no count known, not a failed call.
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": 7}},
    ]
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body = "".join(f"data: {json.dumps({**head, **c})}\n\n" for c in chunks)
    headers = (("content-type", "text/event-stream"),)
    replay.enqueue(RecordedResponse(200, "OK", headers, (body + "data: [DONE]\n\n").encode()))

    done = (await collect(model, hello()))[-1].message

    assert (done.text(), done.usage, done.stop_reason) == ("Hi", Usage(output=7), "stop")


# -- failures ------------------------------------------------------------------------------------


async def test_a_malformed_stream_fails_retryably(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/malformed.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == "openai: malformed stream: an event is not valid JSON"
    assert seen == ["start", "text_delta"]


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


async def test_a_stream_cut_mid_message_fails_retryably(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/cut.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == "openai: connection failed (RemoteProtocolError)"
    assert seen == ["start", "text_delta"]


async def test_a_stream_that_ends_without_finishing_fails_retryably(
    replay: ReplayServer, model: OpenAIChatModel
) -> None:
    replay.enqueue("openai/ended_early.http")

    error, seen = await failure(model, hello())

    assert error.retryable and "no finish_reason" in str(error)
    assert seen == ["start", "text_delta"]


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


async def test_rate_limit_then_success(replay: ReplayServer, model: OpenAIChatModel) -> None:
    replay.enqueue("openai/rate_limited.http", "openai/text.http")

    error, seen = await failure(model, hello())
    events = await collect(model, hello())

    assert error.retryable and error.retry_after == 7.0
    assert str(error).startswith("openai: HTTP 429 tokens: Rate limit reached for gpt-4.1-mini")
    assert seen == []
    assert events[-1].message.text() == "Hello, world!"
    first, second = replay.requests
    assert first.json() == second.json()


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


async def test_a_timeout_is_retryable(replay: ReplayServer) -> None:
    replay.enqueue(RecordedResponse(200, "OK", (), b"", hang=True))
    lm = OpenAIChatModel("gpt-4.1-mini", api_key=KEY, base_url=f"{replay.url}/v1", timeout=0.2)

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == "openai: request timed out"


async def test_a_refused_connection_is_retryable(closed_port: int) -> None:
    lm = OpenAIChatModel("m", api_key=KEY, base_url=f"http://127.0.0.1:{closed_port}/v1")

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == "openai: connection failed (ConnectError)"


# -- secrets ----------------------------------------------------------------------------------


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
