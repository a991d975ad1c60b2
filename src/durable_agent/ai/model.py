"""The language-model protocol: a request in, a stream of deltas out, then the complete message.

Every provider adapter, the :class:`~durable_agent.ai.scripted.ScriptedModel` and the Temporal
activity proxy implement :class:`LanguageModel`. Failures are a single exception type,
:class:`ModelError`, whose ``retryable`` flag is what retry policies (in-process or Temporal) read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from .messages import Message

__all__ = ["LanguageModel", "ModelError", "ModelEvent", "ModelRequest", "ToolSpec"]


class ToolSpec(BaseModel):
    """What the model is told about a tool: its name, purpose and JSON-schema parameters."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(BaseModel):
    """One model call: the system prompt, the conversation, the tools and provider options."""

    model_config = ConfigDict(frozen=True)

    system_prompt: str = ""
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)


class ModelEvent(BaseModel):
    """One streamed step of a model call.

    ``start`` opens the stream; ``text_delta``, ``thinking_delta`` and ``tool_call_delta`` carry the
    new piece in ``delta`` for content block ``index``; ``done`` is always last and carries the
    complete assistant message. ``partial`` is the message as accumulated so far, so a consumer can
    render without re-assembling deltas.
    """

    model_config = ConfigDict(frozen=True)

    type: Literal["start", "text_delta", "thinking_delta", "tool_call_delta", "done"]
    partial: Message
    delta: str = ""
    index: int = 0

    @property
    def message(self) -> Message:
        """The message so far; complete (usage, stop reason) on ``done``."""
        return self.partial


class ModelError(Exception):
    """A model call failed.

    ``retryable`` is true for rate limits, 5xx, timeouts and connection errors, false for bad
    requests and authentication failures. ``retry_after`` is the provider's hint in seconds. The
    message never contains credentials or request headers.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        # Its own type (a ProviderConfigError stays one), message and flags, without calling
        # ``__init__``, whose keyword-only flags the default reduce would not pass.
        return (type(self).__new__, (type(self),), {**self.__dict__, "args": self.args})


@runtime_checkable
class LanguageModel(Protocol):
    """A streaming chat model."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield ``start``, deltas, then ``done`` with the assistant message; raise ModelError."""
        ...
