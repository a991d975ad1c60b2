"""AgentOptions: everything a loop is built from, validated once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..ai.messages import Message, ToolCall
from ..ai.tools import RetryPolicy, Tool
from .hooks import Hooks

__all__ = ["AgentOptions"]


class AgentOptions(BaseModel):
    """Options for one loop. The durable agent passes its base options plus ``history``.

    Unknown options are refused (``extra="forbid"``), so a typo fails at ``new()``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    system_prompt: str = ""
    tools: tuple[Tool, ...] = ()
    max_turns: int | None = Field(default=50, ge=1)
    """Model calls per run; ``None`` for no limit."""
    hooks: Hooks | None = None
    model_options: dict[str, Any] = Field(default_factory=dict)
    """Provider options passed through with every request (temperature, max tokens, …)."""
    model_retry: RetryPolicy = Field(
        default_factory=lambda: RetryPolicy(max_attempts=3, initial_interval=0.5)
    )
    """In-process retries of retryable model errors (Temporal uses its activity retry policy)."""
    approval: Callable[[ToolCall], bool | Awaitable[bool]] | None = None
    """A predicate over every call, consulted after the tool's own ``approval`` rule: ``True``
    when a person must decide the call before it runs (docs/design.md#approvals-and-steering)."""
    approval_wait: float | None = Field(default=3600.0, ge=0, allow_inf_nan=False)
    """Seconds a run waits for decisions before it parks (ends ``awaiting_approval``); ``None``
    waits until the run's execution timeout (so a finite number: ``inf`` is no timer's length)."""
    history: list[Message] = Field(default_factory=list)
    """Earlier turns, as the model sees them; set by the durable agent for each run."""

    def tool(self, name: str) -> Tool | None:
        """The tool called ``name``, if configured."""
        for t in self.tools:
            if t.name == name:
                return t
        return None
