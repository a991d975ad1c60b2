"""A conversation exercising every conversion rule, and the tools it uses.

It has a user image, an assistant turn with thinking, text and two tool calls, one answered and
one left dangling (as a crash between the call and its result leaves it), and a user file. The
request tests run it through :func:`~durable_agent.session.repair_tool_calls`, as every model view
is, so the request carries the synthesized ``tool execution interrupted`` error result (SPEC §5.1).
"""

from __future__ import annotations

from datetime import UTC, datetime

from durable_agent.ai import (
    FileContent,
    ImageContent,
    Message,
    ModelRequest,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolSpec,
)
from durable_agent.session import repair_tool_calls

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5E"
    "rkJggg=="
)
PDF = "JVBERi0xLjQKJcfsj6IKJSVFT0YK"
SIGNATURE = "EqQBCkYIBxgCKkD0c2lnbmF0dXJlLWZyb20tYS1wcmV2aW91cy10dXJu"
SYSTEM = "You are a terse assistant."

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
    },
)
TIME = ToolSpec(name="get_time", parameters={"type": "object", "properties": {"tz": {}}})
TOOLS = [WEATHER, TIME]


def history(api: str, *, call_ids: tuple[str, str]) -> list[Message]:
    """The stored history, before repair; the assistant turn claims to come from ``api``."""
    first, second = call_ids
    return [
        Message(
            role="user",
            content=[
                TextContent(text="What is in this picture?"),
                ImageContent(data=PNG, mime_type="image/png"),
            ],
            timestamp=T0,
        ),
        Message(
            role="assistant",
            content=[
                ThinkingContent(thinking="A cat. Check the weather too.", signature=SIGNATURE),
                TextContent(text="A cat. Checking the weather."),
                ToolCall(id=first, name="get_weather", arguments={"city": "Paris"}),
                ToolCall(id=second, name="get_time", arguments={"tz": "Europe/Paris"}),
            ],
            api=api,
            provider="replay",
            model="replay-1",
            stop_reason="tool_use",
            timestamp=T0,
        ),
        Message(
            role="tool_result",
            content=[TextContent(text="18°C, cloudy")],
            tool_call_id=first,
            tool_name="get_weather",
            timestamp=T0,
        ),
        # No result for the second call: the worker died before writing it.
        Message(
            role="user",
            content=[
                TextContent(text="Summarise this report too."),
                FileContent(data=PDF, mime_type="application/pdf", filename="report.pdf"),
            ],
            timestamp=T0,
        ),
    ]


def repaired_request(api: str, *, call_ids: tuple[str, str], **options: object) -> ModelRequest:
    """The model request a run would send: system prompt, repaired history, both tools."""
    return ModelRequest(
        system_prompt=SYSTEM,
        messages=repair_tool_calls(history(api, call_ids=call_ids)),
        tools=TOOLS,
        options=dict(options),
    )
