"""The Pydantic AI side of (1)+(2): an agent with the ``TemporalDurability`` capability and a
deterministic ``FunctionModel``, run by one workflow per user turn with the conversation so far
passed in (its own module, so the workflow sandbox re-imports only this).

The model mirrors durable-agent's scripted one in ``temporal.py``: every reply is
``reply NNNN`` + ~270 characters; on every 5th user turn it first calls ``lookup`` (equal-sized
result) and replies after the tool result.

``streamed_agent`` (workflow ``PaiStreamedTurn``) is the same agent with an
``event_stream_handler`` on its ``TemporalDurability``: its model activity then calls the
model's ``stream_function`` (``stream``: the same reply, in deltas) and hands every event to
``count_events`` as it comes, and its tool events go through their own activities. The handler
only counts what it saw (``HANDLED``) and publishes it nowhere: Pydantic AI with live tokens
costs at least this.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any, ClassVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import TemporalDurability
    from pydantic_ai.messages import (
        AgentStreamEvent,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
    from pydantic_ai.tools import RunContext
    from pydantic_ai.usage import RequestUsage

TOOL_EVERY = 5
#: ~270 characters, as ``_common.TEXT`` (not imported: the sandbox re-imports this module).
TEXT = "The quick brown fox jumps over the lazy dog. " * 6
USAGE = RequestUsage(input_tokens=1000, output_tokens=100)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(
        1
        for m in messages
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)
    )
    last = messages[-1]
    after_tool = isinstance(last, ModelRequest) and any(
        isinstance(p, ToolReturnPart) for p in last.parts
    )
    text = TextPart(f"reply {turn:04d} {TEXT}")
    if turn % TOOL_EVERY == 0 and not after_tool:
        call = ToolCallPart("lookup", {"k": turn}, tool_call_id=f"call-{turn:04d}")
        return ModelResponse(parts=[text, call], usage=USAGE)
    return ModelResponse(parts=[text], usage=USAGE)


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """``respond``'s reply streamed: its text in one delta, then its tool call (the cost bench
    gives it latency and deltas)."""
    response = respond(messages, info)
    for i, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            yield part.content
        elif isinstance(part, ToolCallPart):
            args, call_id = part.args_as_json_str(), part.tool_call_id
            yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=call_id)}


HANDLED = [0]
"""Model-stream events (part starts and deltas) ``count_events`` saw, in this process."""


async def count_events(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    """The streamed agent's event stream handler: consumes every event, counts the model's
    deltas, publishes nothing."""
    async for event in events:
        if isinstance(event, PartStartEvent | PartDeltaEvent):
            HANDLED[0] += 1


agent = Agent(
    FunctionModel(respond),
    name="peers_chat",
    capabilities=[TemporalDurability()],
)
streamed_agent = Agent(
    FunctionModel(respond, stream_function=stream),
    name="peers_chat_streamed",
    capabilities=[TemporalDurability(event_stream_handler=count_events)],
)


@agent.tool_plain
async def lookup(k: int) -> str:
    """A deterministic tool with an equal-sized result."""
    return f"result {k:04d} {TEXT}"


streamed_agent.tool_plain(lookup)


@workflow.defn(name="peers.pai_turn")
class PaiTurn:
    """One user turn: the agent run with the message history passed in; returns all messages."""

    __pydantic_ai_agents__: ClassVar[list[Any]] = [agent]

    @workflow.run
    async def run(self, prompt: str, history: list[ModelMessage]) -> list[ModelMessage]:
        result = await agent.run(prompt, message_history=history)
        return result.all_messages()


@workflow.defn(name="peers.pai_streamed_turn")
class PaiStreamedTurn:
    """``PaiTurn`` with ``streamed_agent``."""

    __pydantic_ai_agents__: ClassVar[list[Any]] = [streamed_agent]

    @workflow.run
    async def run(self, prompt: str, history: list[ModelMessage]) -> list[ModelMessage]:
        result = await streamed_agent.run(prompt, message_history=history)
        return result.all_messages()


__all__ = [
    "HANDLED",
    "ModelMessagesTypeAdapter",
    "PaiStreamedTurn",
    "PaiTurn",
    "agent",
    "streamed_agent",
]
