"""What crosses the Temporal boundary: workflow inputs, results, query answers, activity arguments.

The workflows' own types live here; the activities' arguments and results live beside the
activities (:mod:`durable_agent.activities.types`, :mod:`durable_agent.activities.wire`) and are
re-exported, so dependencies run one way (``workflows/`` -> ``activities/``) while every public
name stays importable from here. Entries travel as their ``encode_entry`` strings, never as the
whole transcript.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from ..activities.types import (
    AppendInput,
    AppendResult,
    CallModelInput,
    CallToolInput,
    EnsureSessionInput,
    LoadPathInput,
    ModelReply,
    PathInfo,
    PublishInput,
    Stamp,
    StoredTimes,
    SummarizeInput,
    SummaryResult,
    Timeouts,
    ToolInfo,
    ToolReply,
    decode_entries,
    encode_entries,
    stored_times,
    with_stored_times,
)
from ..activities.wire import BodyRefs, FrozenModel, WireEvent, event_from_wire, event_to_wire
from ..ai.messages import Message, Usage
from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry, MessageEntry

__all__ = [
    "AppendInput",
    "AppendResult",
    "BodyRefs",
    "CallModelInput",
    "CallToolInput",
    "CompactInput",
    "EnsureSessionInput",
    "EventsAnswer",
    "InputEntry",
    "LoadPathInput",
    "ModelReply",
    "PathInfo",
    "PublishInput",
    "RunInput",
    "RunResult",
    "RunState",
    "Stamp",
    "SummarizeInput",
    "StoredTimes",
    "SummaryResult",
    "Timeouts",
    "ToolCallRef",
    "ToolInfo",
    "ToolReply",
    "WireEvent",
    "decode_entries",
    "encode_entries",
    "event_from_wire",
    "event_to_wire",
    "stored_times",
    "with_stored_times",
]

SEARCH_ATTRIBUTE = "DurableAgentSessionId"


class InputEntry(FrozenModel):
    """A run input: its encoding plus the ephemeral flag (which the wire never carries), or a
    plain ``message`` with no header and maybe no timestamp (typed by an operator in the
    Temporal UI; see :mod:`.run_input`), which the run stamps."""

    wire: str = ""
    ephemeral: bool = False
    message: Message | None = Field(default=None, exclude_if=lambda v: v is None)

    @classmethod
    def of(cls, entry: Entry, index: int) -> InputEntry:
        placeholder = entry.model_copy(update={"id": entry.id or f"input-{index}"})
        ephemeral = isinstance(entry, MessageEntry) and entry.ephemeral
        return cls(wire=encode_entry(placeholder), ephemeral=ephemeral)

    def entry(self, index: int = 0, now: datetime | None = None) -> Entry:
        """The input entry; a plain message gets the placeholder ID ``input-<index>`` and, when
        it has none, the timestamp ``now`` (the workflow's clock)."""
        if self.message is not None:
            message = self.message
            if message.timestamp is None and now is not None:
                message = message.model_copy(update={"timestamp": now})
            header: dict[str, Any] = {"id": f"input-{index}"}
            if now is not None:
                header["created_at"] = now
            return MessageEntry(**header, message=message, ephemeral=self.ephemeral)
        decoded = decode_entry(self.wire)
        if self.ephemeral and isinstance(decoded, MessageEntry):
            return decoded.model_copy(update={"ephemeral": True})
        return decoded


class RunInput(FrozenModel):
    """Start (or continue) one run. ``leaf_id=None`` means the session's last appended entry."""

    session_id: str
    run_id: str = ""
    """``""`` (an operator's input): the run derives it from its workflow ID."""
    agent: str
    leaf_id: str | None = None
    inputs: list[InputEntry] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    """Plain JSON agent options (system_prompt, max_turns, model_options, …)."""
    continue_as_new_after_turns: int | None = None
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())
    # carried across continue-as-new
    resumed: bool = False
    turn_count: int = 0
    usage: Usage = Field(default_factory=Usage)
    new_entry_ids: list[str] = Field(default_factory=list)
    next_position: int = 1
    events: list[WireEvent] = Field(default_factory=list)
    """The last turn's events; since ``bounded-can-v1`` the last two turns' events without
    their message bodies (their ``refs`` name the stored entries), so this input stays a few KB
    whatever the messages."""
    ephemeral: list[str] = Field(default_factory=list)
    """This run's ephemeral input copies (with headers), for later model calls."""
    start_leaf_id: str | None = None
    """The leaf the run started from (set at first start, carried across continue-as-new)."""
    produced: list[Message] = Field(default_factory=list)


RunStatusName = Literal[
    "starting", "calling_model", "running_tools", "persisting", "completed", "failed", "cancelled"
]


class RunResult(FrozenModel):
    status: RunStatusName
    leaf_id: str
    new_entry_ids: list[str]
    usage: Usage
    turn_count: int
    tail: list[WireEvent] = Field(default_factory=list)
    """The run's last events (its last two turns, bodies over a few hundred bytes left out, a
    bounded size): a client that learns of the end from the result long poll takes the events
    it has not seen from here, instead of querying a closed workflow (which a worker answers
    only by replaying its whole history). Empty from runs started before it existed."""


class ToolCallRef(FrozenModel):
    id: str
    name: str


class RunState(FrozenModel):
    """The ``state()`` query."""

    session_id: str
    run_id: str
    leaf_id: str
    status: RunStatusName
    turn_count: int
    pending_tool_calls: list[ToolCallRef]
    new_entry_ids: list[str]
    usage: Usage


class EventsAnswer(FrozenModel):
    """The ``events(after)`` query: retained events past ``after``, and the first retained one."""

    events: list[WireEvent]
    first_position: int
    last_position: int


class CompactInput(FrozenModel):
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())
    session_id: str
    op_id: str
    agent: str
    leaf_id: str
    keep_turns: int = 0
    prompt: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
