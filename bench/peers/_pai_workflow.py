"""The Pydantic AI side of (1)+(2): an agent with the ``TemporalDurability`` capability and a
deterministic ``FunctionModel``, run by one workflow per user turn with the conversation so far
passed in (its own module, so the workflow sandbox re-imports only this).

The model mirrors durable-agent's scripted one in ``temporal.py``: every reply is
``reply NNNN`` + ~270 characters; on every 5th user turn it first calls ``lookup`` (equal-sized
result) and replies after the tool result.
"""

from __future__ import annotations

from typing import Any, ClassVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import TemporalDurability
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
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


agent = Agent(
    FunctionModel(respond),
    name="peers_chat",
    capabilities=[TemporalDurability()],
)


@agent.tool_plain
async def lookup(k: int) -> str:
    """A deterministic tool with an equal-sized result."""
    return f"result {k:04d} {TEXT}"


@workflow.defn(name="peers.pai_turn")
class PaiTurn:
    """One user turn: the agent run with the message history passed in; returns all messages."""

    __pydantic_ai_agents__: ClassVar[list[Any]] = [agent]

    @workflow.run
    async def run(self, prompt: str, history: list[ModelMessage]) -> list[ModelMessage]:
        result = await agent.run(prompt, message_history=history)
        return result.all_messages()


__all__ = ["ModelMessagesTypeAdapter", "PaiTurn", "agent"]
