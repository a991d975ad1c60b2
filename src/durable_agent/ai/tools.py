"""Tool definitions: a name, a description, a JSON schema and an async handler.

The schema comes from a pydantic model or from the handler's type hints, so what the model is told
and what the handler is given are checked by the same validator. Each tool says whether it is safe
to run in parallel with others and how it is retried (in-process and as a Temporal activity).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from .messages import ContentBlock, TextContent, ToolCall
from .model import ToolSpec

__all__ = ["RetryPolicy", "Tool", "ToolContext", "ToolResult", "tool"]

ToolResult = str | list[ContentBlock]
"""What a handler returns: plain text, or content blocks (text, images, files)."""


class RetryPolicy(BaseModel):
    """How often a failing tool is retried before its error becomes the tool result."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=3, ge=1)
    initial_interval: float = Field(default=1.0, ge=0)
    backoff: float = Field(default=2.0, ge=1)
    max_interval: float = Field(default=30.0, ge=0)
    non_retryable: tuple[str, ...] = ("ValueError", "TypeError", "ValidationError", "KeyError")
    """Exception type names that are never retried."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return min(self.initial_interval * self.backoff ** (attempt - 1), self.max_interval)


@dataclass
class ToolContext:
    """Given to handlers that ask for it: the call being answered and a progress channel."""

    tool_call_id: str
    tool_name: str
    report: Callable[[str], Awaitable[None]]
    """Send a partial result (a ``tool_execution_update`` event); never stored."""


Handler = Callable[..., Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    """A callable tool. Build one with :func:`tool` or directly."""

    name: str
    description: str
    args_model: type[BaseModel]
    handler: Handler
    parallel_safe: bool = True
    """Run concurrently with the other calls of a turn when every called tool allows it."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float = 300.0
    """Seconds one attempt may take (also the Temporal activity's start-to-close)."""
    wants_context: bool = False
    takes_model: bool = False
    """The handler takes the validated argument model itself rather than its fields."""
    approval: bool | Callable[[ToolCall], bool | Awaitable[bool]] = False
    """Whether a person decides each call before it runs: ``True``, or a predicate (sync or
    async) over the call (docs/design.md#approvals-and-steering)."""

    @functools.cached_property
    def spec(self) -> ToolSpec:
        """What the model is told about this tool, built once per tool: generating a JSON schema
        takes about as long as a whole no-op activity round trip, and a Temporal worker needs
        the specs for every model call. Shared between calls, so treat it as read-only."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return ToolSpec(name=self.name, description=self.description, parameters=schema)

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext) -> list[ContentBlock]:
        """Validate ``arguments`` and call the handler; returns the result as content blocks."""
        args = self.args_model.model_validate(arguments)
        kwargs: dict[str, Any] = {}
        if self.takes_model:
            call_args: tuple[Any, ...] = (args,)
        else:
            call_args = ()
            kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.wants_context:
            kwargs["ctx"] = ctx
        result = await self.handler(*call_args, **kwargs)
        if isinstance(result, str):
            return [TextContent(text=result)]
        return list(result)


def _args_model(fn: Callable[..., Any]) -> tuple[type[BaseModel], bool, bool]:
    """The argument model of ``fn``, whether it takes the model itself, and whether it wants ctx."""
    hints = get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "ctx"]
    wants_ctx = "ctx" in inspect.signature(fn).parameters
    if len(params) == 1:
        only = hints.get(params[0].name)
        if isinstance(only, type) and issubclass(only, BaseModel):
            return only, True, wants_ctx
    fields: dict[str, Any] = {}
    for p in params:
        annotation = hints.get(p.name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (annotation, default)
    model = create_model(f"{fn.__name__}_args", **fields)
    return model, False, wants_ctx


@overload
def tool(fn: Handler, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    retry: RetryPolicy | None = None,
    timeout: float = 300.0,
    approval: bool | Callable[[ToolCall], bool | Awaitable[bool]] = False,
) -> Callable[[Handler], Tool]: ...


def tool(
    fn: Handler | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    retry: RetryPolicy | None = None,
    timeout: float = 300.0,
    approval: bool | Callable[[ToolCall], bool | Awaitable[bool]] = False,
) -> Tool | Callable[[Handler], Tool]:
    """Make a :class:`Tool` from an async function; the docstring is the default description.

    The function takes either one pydantic model or plain typed parameters (a parameter named
    ``ctx`` receives a :class:`ToolContext`). ``approval``: a person decides each call first
    (``True``, or a predicate over the call).
    """

    def build(f: Handler) -> Tool:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"tool handler {f.__name__} must be an async function")
        model, takes_model, wants_ctx = _args_model(f)
        return Tool(
            name=name or f.__name__,
            description=description if description is not None else inspect.getdoc(f) or "",
            args_model=model,
            handler=f,
            parallel_safe=parallel_safe,
            retry=retry or RetryPolicy(),
            timeout=timeout,
            wants_context=wants_ctx,
            takes_model=takes_model,
            approval=approval,
        )

    if fn is not None:
        return build(fn)
    return build
