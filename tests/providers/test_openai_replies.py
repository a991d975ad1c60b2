"""What the OpenAI Chat Completions adapter makes of a streamed reply, through the real ``openai``
SDK against the replay server: deltas and partials, tool calls, stop reasons, usage, and the
reply sent back as the next request's history.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agent.ai import (
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    tool_result_message,
    user_message,
)
from durable_agent.ai.providers.openai import OpenAIChatModel

from .adapters import hello, openai_model
from .conftest import collect
from .replay_server import RecordedResponse, ReplayServer

ADAPTER = openai_model
"""What the ``model`` fixture builds (the providers' conftest)."""


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
    # This server ignores include_usage (its chunks carry no usage field): no usage is owed, so
    # the reply has none, unlike a stream whose promised usage chunk never came.
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
