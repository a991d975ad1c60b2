"""What the OpenAI Chat Completions adapter sends: the request body, through the real ``openai``
SDK against the replay server, and the history conversion behind it.
"""

from __future__ import annotations

from durable_agent.ai import (
    FileContent,
    ImageContent,
    Message,
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    tool_result_message,
    user_message,
)
from durable_agent.ai.providers.openai import OpenAIChatModel, to_openai_messages

from .adapters import OPENAI_KEY as KEY
from .adapters import openai_model
from .conftest import collect, failure
from .history import PDF, PNG, SYSTEM, TOOLS, repaired_request
from .replay_server import ReplayServer

ADAPTER = openai_model
"""What the ``model`` fixture builds (the providers' conftest)."""


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


def test_stream_options_given_as_an_option_keep_the_usage_chunk(model: OpenAIChatModel) -> None:
    """An option ``stream_options`` (``include_obfuscation``, say) adds to the adapter's: it
    replaced them, so the usage chunk was never asked for and every reply cost zero. An
    ``include_usage`` given there is the caller's to set."""
    request = ModelRequest(options={"stream_options": {"include_obfuscation": False}})
    body = model.request_body(request)
    assert body["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    off = ModelRequest(options={"stream_options": {"include_usage": False}})
    assert model.request_body(off)["stream_options"] == {"include_usage": False}


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


def test_a_tool_results_files_follow_the_results_with_its_images() -> None:
    """Tool messages carry text only: a file a tool answered with (a PDF it read) goes in the
    user message after the results, as its images do, not dropped for an empty result."""
    image = ImageContent(data=PNG, mime_type="image/png")
    report = FileContent(data=PDF, mime_type="application/pdf", filename="report.pdf")
    messages = [
        Message(role="assistant", content=[ToolCall(id="a", name="read")]),
        tool_result_message("a", "read", TextContent(text="read it"), report, image),
    ]

    converted = to_openai_messages("", messages)

    assert [m["role"] for m in converted] == ["assistant", "tool", "user"]
    assert converted[2]["content"][1:] == [
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "report.pdf"},
        },
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
