"""Running one tool call: the in-process executor and the interface the Temporal one implements.

An executor always returns a result message. When it gives up on a tool (retries exhausted, a
non-retryable error) it answers with an error result itself (docs/design.md#repair-and-reconcile),
so the only way to leave an unanswered call is a hard kill, which run-start repair handles."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from ..ai.messages import Message, ToolCall, error_tool_result_message, tool_result_message
from ..ai.redaction import configured_secrets, redact
from ..ai.tools import Tool, ToolContext

__all__ = [
    "LocalToolExecutor",
    "ToolExecutor",
    "TurnPlanner",
    "failure_text",
    "unknown_tool_result",
]

Report = Callable[[str], Awaitable[None]]


def failure_text(exc: BaseException) -> str:
    """``tool execution failed: <ExceptionType>: <message>``, the message redacted of this
    process's keys: it is stored and sent to the model (docs/design.md#errors)."""
    message = redact(str(exc), configured_secrets(os.environ))
    return f"tool execution failed: {type(exc).__name__}: {message}"


def unknown_tool_result(call: ToolCall) -> Message:
    return error_tool_result_message(
        call.id, call.name, failure_text(LookupError(f"unknown tool {call.name!r}"))
    )


class ToolExecutor(Protocol):
    """Runs one call of ``tool`` (``None`` when no tool has the call's name)."""

    async def execute(self, tool: Tool | None, call: ToolCall, report: Report) -> Message: ...


@runtime_checkable
class TurnPlanner(Protocol):
    """An executor told a turn's calls, and whether they run at once, before the first starts:
    on Temporal who stores each result depends on it (docs/design.md#stamps-and-producers), and
    only the loop knows which calls a turn runs (a resumed turn: those still unanswered)."""

    def plan_turn(self, calls: list[ToolCall], parallel: bool) -> None: ...


class LocalToolExecutor:
    """Runs tools in this process with each tool's retry policy and per-attempt timeout."""

    async def execute(self, tool: Tool | None, call: ToolCall, report: Report) -> Message:
        if tool is None:
            return unknown_tool_result(call)
        ctx = ToolContext(tool_call_id=call.id, tool_name=call.name, report=report)
        attempt = 1
        while True:
            try:
                blocks = await asyncio.wait_for(tool.invoke(call.arguments, ctx), tool.timeout)
                return tool_result_message(call.id, call.name, *blocks)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                policy = tool.retry
                if type(exc).__name__ in policy.non_retryable or attempt >= policy.max_attempts:
                    return error_tool_result_message(call.id, call.name, failure_text(exc))
                await asyncio.sleep(policy.delay(attempt))
                attempt += 1
