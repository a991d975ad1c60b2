"""The inner loop's events, in a fixed order (docs/design.md#receipts).

``agent_start``; per turn ``turn_start``, the assistant's ``message_start``, ``message_update``…,
``message_end``, per tool ``tool_execution_start``, ``tool_execution_update``…,
``tool_execution_end`` and the result's ``message_start``/``message_end``, then ``turn_end``;
``agent_end`` on success only. A run that waits for people adds ``approval_requested`` after a
reply's ``message_end``, ``approval_decided`` per decision, and ``input_delivered`` for a message
sent into the run (after a ``turn_end``), each with its stored entries as the receipt
(docs/design.md#approvals-and-steering).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..ai.messages import Message, ToolCall, Usage

__all__ = ["AgentEvent", "AgentEventType", "tool_end", "tool_start"]

AgentEventType = Literal[
    "agent_start",
    "turn_start",
    "message_start",
    "message_update",
    "message_end",
    "tool_execution_start",
    "tool_execution_update",
    "tool_execution_end",
    "turn_end",
    "agent_end",
    "approval_requested",
    "approval_decided",
    "input_delivered",
]


class AgentEvent(BaseModel):
    """One step of a run. Fields are set only for the event types that carry them."""

    model_config = ConfigDict(frozen=True)

    type: AgentEventType
    message: Message | None = None
    """``message_*``: the message (partial on ``message_update``)."""
    input: list[Message] | None = None
    """``turn_start``: messages a hook injected to start this turn."""
    tool_call_id: str | None = None
    tool_name: str | None = None
    args: dict[str, Any] | None = None
    partial_result: str | None = None
    result: Message | None = None
    is_error: bool | None = None
    messages: list[Message] | None = Field(default=None)
    """``agent_end``: every message the run produced."""
    usage: Usage | None = None
    """``agent_end``: the run's total usage."""
    delta: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """``message_update``: the text this update adds to what the previous update of its message
    showed (after a ``restart``, the reply's whole text so far), so a consumer prints ``delta``
    (and starts over on ``restart``); ``""`` when only something else grew (thinking, a tool
    call's arguments). ``None`` on every other event, and then left out of the JSON."""
    restart: bool = Field(default=False, exclude_if=lambda v: not v)
    """``message_update`` on Temporal: the model call was retried (a worker crashed mid-stream)
    and this partial starts the reply over; discard what the earlier updates showed. In process
    (and on every other event) always ``False``, and then left out of the JSON, so recorded
    events (query answers, continue-as-new inputs) are byte for byte what they were before."""


def tool_start(call: ToolCall) -> AgentEvent:
    return AgentEvent(
        type="tool_execution_start", tool_call_id=call.id, tool_name=call.name, args=call.arguments
    )


def tool_end(call: ToolCall, result: Message) -> AgentEvent:
    return AgentEvent(
        type="tool_execution_end",
        tool_call_id=call.id,
        tool_name=call.name,
        result=result,
        is_error=result.is_error,
    )
