"""Which calls wait for a person, and what the loop does with a person's decision.

A call needs approval when its tool's own rule (``tool(..., approval=True | predicate)``) or the
agent's ``approval`` predicate says so; predicates run where tools run (the worker on Temporal),
never in workflow code, and server-side calls never need approval. The loop itself never waits:
whoever drives it (the durable engine) hands it a :class:`Verdict` per decided call before it runs
the turn's tools (docs/design.md#approvals-and-steering).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..ai.messages import Message, ToolCall, error_tool_result_message
from ..ai.tools import Tool

__all__ = [
    "DENIED_TEXT",
    "ApprovalRule",
    "Resume",
    "Verdict",
    "denied_result",
    "needs_approval",
]

DENIED_TEXT = "tool call denied"

ApprovalRule: TypeAlias = Callable[[ToolCall], "bool | Awaitable[bool]"]
"""A predicate over one call: ``True`` when a person must decide it first."""


@dataclass(frozen=True)
class Verdict:
    """A person's decision on one call, as the loop needs it."""

    approved: bool
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments: the call runs with these instead of the model's."""

    def apply(self, call: ToolCall) -> ToolCall:
        """``call`` as it runs: with the edited arguments, if any."""
        if self.args is None:
            return call
        return call.model_copy(update={"arguments": dict(self.args)})


@dataclass(frozen=True)
class Resume:
    """Start a run from a stored assistant message instead of a model call: its calls are
    decided (or were never asked about) and some may be answered already (``results``)."""

    assistant: Message
    results: list[Message] = field(default_factory=list)


def denied_result(call: ToolCall, reason: str | None) -> Message:
    """The stored answer of a denied call: ``tool call denied[: <reason>]``, an error."""
    text = DENIED_TEXT if not reason else f"{DENIED_TEXT}: {reason}"
    return error_tool_result_message(call.id, call.name, text)


async def _says_yes(rule: bool | ApprovalRule | None, call: ToolCall) -> bool:
    if rule is None or isinstance(rule, bool):
        return bool(rule)
    answer = rule(call)
    if inspect.isawaitable(answer):
        answer = await answer
    return bool(answer)


async def needs_approval(
    calls: Sequence[ToolCall],
    tools: Sequence[Tool],
    agent_rule: ApprovalRule | None = None,
) -> list[str]:
    """IDs of the ``calls`` a person must decide, in call order: the tool's rule first, then
    the agent's. Server-side calls never need approval."""
    by_name = {t.name: t for t in tools}
    out: list[str] = []
    for call in calls:
        if call.server:
            continue
        tool = by_name.get(call.name)
        rule = None if tool is None else tool.approval
        if await _says_yes(rule, call) or await _says_yes(agent_rule, call):
            out.append(call.id)
    return out
