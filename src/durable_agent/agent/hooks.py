"""Hooks around model calls and tool calls: per-call interception belongs here.

Each hook may be a plain or a coroutine function. A hook returning ``None`` changes nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from ..ai.messages import Message, ToolCall
from ..ai.model import ModelRequest

__all__ = ["Hooks", "call_hook"]

T = TypeVar("T")

MaybeAwaitable: TypeAlias = T | Awaitable[T]


@dataclass(frozen=True)
class Hooks:
    """Interception points of the loop.

    - ``before_model(request)``: return a replacement request (e.g. trimmed or annotated).
    - ``after_model(message)``: return a replacement assistant message.
    - ``before_tool(call)``: return a replacement call, or a ``tool_result`` Message to answer the
      call without running the tool (a permission check, a cache).
    - ``after_tool(call, result)``: return a replacement result message.
    - ``follow_up(messages)``: called when the loop would stop; returned messages (e.g. a user
      nudge) start another turn and are stored like any other message.
    """

    before_model: Callable[[ModelRequest], MaybeAwaitable[ModelRequest | None]] | None = None
    after_model: Callable[[Message], MaybeAwaitable[Message | None]] | None = None
    before_tool: Callable[[ToolCall], MaybeAwaitable[ToolCall | Message | None]] | None = None
    after_tool: Callable[[ToolCall, Message], MaybeAwaitable[Message | None]] | None = None
    follow_up: Callable[[Sequence[Message]], MaybeAwaitable[Sequence[Message] | None]] | None = None


async def call_hook(hook: Callable[..., Any] | None, *args: Any) -> Any:
    """Call a plain or coroutine hook; ``None`` when there is no hook."""
    if hook is None:
        return None
    result = hook(*args)
    if inspect.isawaitable(result):
        result = await result
    return result
