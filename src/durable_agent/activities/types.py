"""The activities' arguments and results: what crosses the Temporal boundary into an activity.

Each activity owns its input and output types here, beside the activities (issue 14 item 3), so
``activities/`` never imports ``workflows/``; :mod:`durable_agent.workflows.types` re-exports
them with the workflow's own types. Entries travel as their ``encode_entry`` strings (an exact
round trip that keeps custom classes and extras), never as the whole transcript: activities read
the active path from the store by ``(session_id, leaf_id)``, so history grows per turn by that
turn's messages only. Class and field names are the payloads' JSON: renaming one changes what
recorded histories replay.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..ai.messages import Message
from ..ai.timefmt import format_time, parse_time
from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry, MessageEntry
from .wire import FrozenModel, WireEvent

__all__ = [
    "AppendInput",
    "AppendResult",
    "CallModelInput",
    "CallToolInput",
    "EnsureSessionInput",
    "FrozenModel",
    "LoadPathInput",
    "ModelReply",
    "PathInfo",
    "PublishInput",
    "Stamp",
    "StoredTimes",
    "SummarizeInput",
    "SummaryResult",
    "Timeouts",
    "ToolInfo",
    "ToolReply",
    "decode_entries",
    "encode_entries",
    "stored_times",
    "with_stored_times",
]


def encode_entries(entries: list[Entry]) -> list[str]:
    return [encode_entry(e) for e in entries]


def decode_entries(wires: list[str]) -> list[Entry]:
    return [decode_entry(w) for w in wires]


class Timeouts(FrozenModel):
    """Activity timing; defaults suit LLM calls, tests shorten them via run options."""

    model_start_to_close: float = 600.0
    model_heartbeat: float = 2.0
    model_max_attempts: int = 5
    retry_initial: float = 0.5
    retry_max: float = 30.0
    store_start_to_close: float = 30.0
    store_max_attempts: int = 10
    store_heartbeat: float = 5.0
    """Store activities heartbeat (after a short grace period), so a worker killed inside an
    append or load is noticed within this many seconds rather than at start-to-close."""
    tool_heartbeat: float = 2.0
    """As ``model_heartbeat``: a worker killed while a tool runs is noticed within this many
    seconds (tools heartbeat in the background while they run), so a tool's crash recovery
    costs about what a model call's does (issue 10)."""


class ToolInfo(FrozenModel):
    """What the workflow knows of a worker tool: enough to schedule it, not to run it."""

    name: str
    parallel_safe: bool = True
    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 30.0
    non_retryable: list[str] = Field(default_factory=list)
    timeout: float = 300.0


class EnsureSessionInput(FrozenModel):
    session_id: str
    agent: str
    """Checked first: a run for an unknown agent creates nothing."""
    reset_of: str | None = None
    """Set in a reset execution: the original run, whose resolved leaf the retry starts from."""


class LoadPathInput(FrozenModel):
    session_id: str
    leaf_id: str
    agent: str


class PathInfo(FrozenModel):
    """``load_path``'s answer: the repairs a run must store first, and the agent's tools."""

    repairs: list[Message]
    turn_count: int = 0
    """Never read, no longer computed: kept (always 0) because a worker of an earlier version
    requires it when it decodes this result, during a rolling deploy or a rollback."""
    tools: list[ToolInfo]
    max_turns: int | None


class AppendInput(FrozenModel):
    session_id: str
    entries: list[str]


class StoredTimes(FrozenModel):
    """The clock-derived fields of one appended entry, as written (RFC 3339 strings)."""

    created_at: str
    timestamp: str | None = None
    """A message entry's message timestamp."""


class AppendResult(FrozenModel):
    """What ``append_entries`` wrote, reduced to the fields that come from ``workflow.now()``.

    Recorded in history, so a workflow whose replay computed other times (a workflow task
    re-run after a server restart can see a different ``workflow.now()``) still reports the
    stored entries, not its recomputed ones. A few bytes per entry."""

    times: list[StoredTimes]


class Stamp(FrozenModel):
    """An entry header the workflow reserves before the producing activity runs: ID from
    ``workflow.random()``, parent = the leaf, ``created_at`` from ``workflow.now()``."""

    id: str
    parent_id: str | None = None
    created_at: str


class CallModelInput(FrozenModel):
    session_id: str
    leaf_id: str
    agent: str
    start_leaf_id: str | None = None
    """The run's starting leaf: the view is history there plus this run's messages, as
    in-process (input compactions and custom entries are stored, never sent this run)."""
    options: dict[str, Any] = Field(default_factory=dict)
    ephemeral: list[str] = Field(default_factory=list)
    stamp: Stamp | None = None
    """The reply's entry header, reserved by the workflow: the activity commits the reply under
    it (SPEC §7.2). ``None`` (histories from before producer commits): the workflow appends."""
    run_id: str = ""
    position: int = 0
    """The run and the position of the reply's ``message_start``: the key its live deltas are
    published under (issue 13); ``""``/``0`` publishes none."""


class ModelReply(FrozenModel):
    """``call_model``'s answer. ``cancelled``: the run was cancelled mid-call and ``message`` is
    the partial reply as stored (``stop_reason="aborted"``, unfinished tool calls removed).
    ``stored``: the activity committed ``message`` under the call's stamp (these are its stored
    times); the workflow then records the receipt without another append."""

    message: Message
    cancelled: bool = False
    stored: StoredTimes | None = None


class CallToolInput(FrozenModel):
    session_id: str
    agent: str
    call: dict[str, Any]
    """The ToolCall block, as JSON."""
    stamp: Stamp | None = None
    """The result's entry header: the activity commits the result under it and answers a
    :class:`ToolReply` (``None``: the workflow appends it, the answer is the bare message)."""


class ToolReply(FrozenModel):
    """``call_tool``'s answer for a stamped call: the result as stored, with its stored times."""

    message: Message
    stored: StoredTimes


class SummarizeInput(FrozenModel):
    session_id: str
    agent: str
    leaf_id: str
    keep_turns: int = 0
    prompt: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class SummaryResult(FrozenModel):
    summary: str
    first_kept_id: str
    tokens_before: int


class PublishInput(FrozenModel):
    events: list[WireEvent]
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())


def stored_times(entry: Entry) -> StoredTimes:
    timestamp = None
    if isinstance(entry, MessageEntry) and entry.message.timestamp is not None:
        timestamp = format_time(entry.message.timestamp)
    return StoredTimes(created_at=format_time(entry.created_at), timestamp=timestamp)


def with_stored_times(entry: Entry, times: StoredTimes) -> Entry:
    """``entry`` with the times the store has for it (itself when they agree)."""
    if stored_times(entry) == times:
        return entry
    update: dict[str, Any] = {"created_at": parse_time(times.created_at)}
    if isinstance(entry, MessageEntry) and times.timestamp is not None:
        message = entry.message.model_copy(update={"timestamp": parse_time(times.timestamp)})
        update["message"] = message
    return entry.model_copy(update=update)
