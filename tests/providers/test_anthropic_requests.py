"""What the Anthropic Messages adapter sends: the request body, through the real ``anthropic`` SDK
against the replay server, and the history conversion behind it.
"""

from __future__ import annotations

import base64

from durable_agent.ai import (
    FileContent,
    ImageContent,
    Message,
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    tool_result_message,
)
from durable_agent.ai.providers.anthropic import (
    AnthropicModel,
    to_anthropic_messages,
)

from .adapters import ANTHROPIC_KEY as KEY
from .adapters import anthropic_model, hello
from .conftest import collect, failure, header_values
from .history import PDF, PNG, SIGNATURE, SYSTEM, TOOLS, history, repaired_request
from .replay_server import ReplayServer

ADAPTER = anthropic_model
"""What the ``model`` fixture builds (the providers' conftest)."""


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


def test_a_tool_results_files_and_images_are_sent_in_the_result() -> None:
    """A tool that reads a PDF or takes a screenshot answers with it: the model is sent it in
    the result, not an empty result it would call the tool again for."""
    image = ImageContent(data=PNG, mime_type="image/png")
    report = FileContent(data=PDF, mime_type="application/pdf", filename="report.pdf")
    messages = [
        Message(role="assistant", content=[ToolCall(id="a", name="read")]),
        tool_result_message("a", "read", TextContent(text="read it"), report, image),
    ]

    [_, results] = to_anthropic_messages(messages)

    assert results["content"][0]["content"] == [
        {"type": "text", "text": "read it"},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "report.pdf",
        },
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
