"""What the Anthropic Messages adapter makes of a streamed reply, through the real ``anthropic`` SDK
against the replay server: deltas and partials, thinking and its signature, tool calls, stop
reasons, usage, and the reply sent back as the next request's history.
"""

from __future__ import annotations

import pytest

from durable_agent.ai import (
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
)

from .adapters import anthropic_model, hello
from .conftest import collect
from .replay_server import ReplayServer

ADAPTER = anthropic_model
"""What the ``model`` fixture builds (the providers' conftest)."""


STREAMED_THINKING = "The user wants the weather in Paris and the local time. I'll call both tools."


STREAMED_SIGNATURE = (
    "EqQBCkYIBxgCKkCzAYZIjLm9Hl8QeV3u1cYd0FkTqPbWd6sYRj0aH7LzUoGvN2mXhK4tJ9cQrE1wS5uIpA8nB3fD6gM2y"
    "ZxAEgwVb7nQpT3kLm9sR4cYBSIMx9wq2Ez5aFhJ3kTuIjD0pWqR8vN1cL6mY4bS7hX2eKz9gA=="
)


REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8URj"
    "2pLmKQ=="
)


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


async def test_a_tool_call_cut_by_max_tokens_is_shown_as_it_streams_and_left_out_of_the_reply(
    replay: ReplayServer, model: AnthropicModel
) -> None:
    replay.enqueue("anthropic/max_tokens.http")

    events = await collect(model, hello())

    cut = {"path": "notes.txt", "text": "first li"}
    assert [c.arguments for c in events[-2].partial.tool_calls()] == [cut]
    done = events[-1].message
    assert (done.content, done.stop_reason) == ([], "length")
