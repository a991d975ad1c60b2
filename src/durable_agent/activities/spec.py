"""AgentSpec: a named agent as a worker registers it (model, tools, system prompt).

The worker owns everything that must not travel through Temporal: the model client and its
credentials, tool handlers, hooks. Clients name the agent and may override plain options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..agent.approval import ApprovalRule
from ..agent.options import AgentOptions
from ..ai.model import LanguageModel
from ..ai.tools import Tool
from ..durable.inputs import check_agent_options

__all__ = ["PLAIN_OPTIONS", "AgentSpec"]

PLAIN_OPTIONS = frozenset({"system_prompt", "max_turns", "model_options", "approval_wait"})
"""Options a client may send with a run (plain JSON); the rest belong to the worker."""


@dataclass(frozen=True)
class AgentSpec:
    """A worker-side agent definition."""

    model: LanguageModel
    tools: Sequence[Tool] = ()
    system_prompt: str = ""
    max_turns: int | None = 50
    model_options: dict[str, Any] = field(default_factory=dict)
    approval: ApprovalRule | None = None
    """A predicate over every call (after the tool's own rule): a person decides it first; run
    on the worker, never in workflow code (docs/design.md#approvals-and-steering)."""
    approval_wait: float | None = 3600.0
    """Seconds a run waits for decisions before it parks; ``None``: until its execution
    timeout. A client may override it with the plain option of that name."""

    def __post_init__(self) -> None:
        """Refuse a value no run could use as ``new()`` does (:class:`InvalidRunInputError`
        naming the option), when the spec is made: else a worker registered it and every run
        of the agent failed as it started."""
        check_agent_options(self._base())

    def options(self, plain: dict[str, Any] | None = None) -> AgentOptions:
        """The loop options for a run: this spec, overridden by the client's plain options."""
        base = self._base()
        for key, value in (plain or {}).items():
            if key in PLAIN_OPTIONS:
                base[key] = value
        return AgentOptions(**base)

    def _base(self) -> dict[str, Any]:
        return {
            "system_prompt": self.system_prompt,
            "max_turns": self.max_turns,
            "model_options": self.model_options,  # validated into a new dict
            "tools": self.tools,
            "approval": self.approval,
            "approval_wait": self.approval_wait,
        }

    def tool(self, name: str) -> Tool | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None
