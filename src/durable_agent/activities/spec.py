"""AgentSpec: a named agent as a worker registers it (model, tools, system prompt).

The worker owns everything that must not travel through Temporal: the model client and its
credentials, tool handlers, hooks. Clients name the agent and may override plain options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..agent.options import AgentOptions
from ..ai.model import LanguageModel
from ..ai.tools import Tool

__all__ = ["PLAIN_OPTIONS", "AgentSpec"]

PLAIN_OPTIONS = frozenset({"system_prompt", "max_turns", "model_options"})
"""Options a client may send with a run (plain JSON); the rest belong to the worker."""


@dataclass(frozen=True)
class AgentSpec:
    """A worker-side agent definition."""

    model: LanguageModel
    tools: Sequence[Tool] = ()
    system_prompt: str = ""
    max_turns: int | None = 50
    model_options: dict[str, Any] = field(default_factory=dict)

    def options(self, plain: dict[str, Any] | None = None) -> AgentOptions:
        """The loop options for a run: this spec, overridden by the client's plain options."""
        base: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "max_turns": self.max_turns,
            "model_options": dict(self.model_options),
            "tools": tuple(self.tools),
        }
        for key, value in (plain or {}).items():
            if key in PLAIN_OPTIONS:
                base[key] = value
        return AgentOptions(**base)

    def tool(self, name: str) -> Tool | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None
