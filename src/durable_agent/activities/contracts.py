"""The types that cross the Temporal boundary between a workflow and its activities: activity
arguments and results, and events on the wire (docs/design.md#temporal); what clients and
operators exchange with the workflows (inputs, results, query answers) is in
:mod:`.run_contracts`, built on this module.

The other modules of ``activities/`` and ``workflows/`` import this one, which imports none of
them. Entries travel as their ``encode_entry`` strings (an exact round trip that keeps custom
classes and extras), never as the whole transcript: activities read the active path from the
store by ``(session_id, leaf_id)``, so history grows per turn by that turn's messages only.
Class and field names are the payloads' JSON: renaming one changes what recorded histories
replay (docs/design.md#versioning); an operator reads them in the Temporal UI. The header a
producer commits under is the stamping algorithm's own ``durable.persist.Header``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_serializer
from pydantic import SerializationInfo as Info
from pydantic import SerializerFunctionWrapHandler as Handler

from ..agent.events import AgentEvent
from ..ai.messages import Message
from ..ai.timefmt import format_time, parse_time
from ..durable.events import Event, EventFields
from ..durable.persist import Header
from ..session.approvals import ApprovalRequest
from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry, MessageEntry

__all__ = [
    "AppendInput",
    "AppendResult",
    "BodyRefs",
    "CallModelInput",
    "CallToolInput",
    "CancelNoteInput",
    "EnsureSessionInput",
    "FrozenModel",
    "KeepLeafInput",
    "LoadPathInput",
    "ModelReply",
    "PathInfo",
    "PublishInput",
    "SettleInput",
    "StoredTimes",
    "SummarizeInput",
    "Timeouts",
    "ToolInfo",
    "ToolReply",
    "WireEvent",
    "event_from_wire",
    "event_to_wire",
]


class FrozenModel(BaseModel):
    """Crosses the Temporal boundary: frozen; its JSON leaves out fields at their defaults."""

    model_config = ConfigDict(frozen=True)

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: Handler, info: Info) -> Any:
        data = handler(self)
        for name, default in _defaults(type(self)).items() if info.mode_is_json() else ():
            if getattr(self, name) == default:
                data.pop(name, None)
        return data


_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """Each field's default, its factory called once per class: every activity and workflow
    payload is serialized through here, and pydantic inspects a factory's signature per call."""
    found = _DEFAULTS.get(cls)
    if found is None:
        fields = cls.model_fields.items()
        found = _DEFAULTS[cls] = {n: f.get_default(call_default_factory=True) for n, f in fields}
    return found


class Timeouts(FrozenModel):
    """Activity timing; defaults suit LLM calls, tests shorten them via run options.

    A heartbeat timeout is how long a crashed worker's call goes unnoticed before Temporal
    retries it elsewhere; a call sends its first heartbeat half a timeout in and the next 0.8
    timeouts apart (``activities.base.heartbeating``), so a call shorter than half the timeout
    sends none: with 10 s, a model call costs no heartbeat up to 5 s and one up to 13 s. A run's
    cancellation does not wait for a heartbeat (docs/design.md#cancellation)."""

    model_start_to_close: float = 600.0
    model_heartbeat: float = 10.0
    model_max_attempts: int = 5
    retry_initial: float = 0.5
    retry_max: float = 30.0
    store_start_to_close: float = 30.0
    store_max_attempts: int = 10
    store_heartbeat: float = 5.0
    """Store activities heartbeat too, so a worker killed inside an append or load is noticed
    within this many seconds rather than at start-to-close."""
    tool_heartbeat: float = 10.0
    """As ``model_heartbeat``: a worker killed while a tool runs is noticed within this many
    seconds (tools heartbeat in the background while they run)."""


# -- the store steps ------------------------------------------------------------------------


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
    inputless: bool = False
    """The run has no input: a session absent or empty has nothing to answer (the run fails
    with ``InvalidRunInput`` and creates nothing)."""
    own_ids: list[str] = Field(default_factory=list)
    """IDs the run's own first batch (repairs and input) is stored under: in a re-run workflow
    task that batch may be stored already, and is never the run's starting leaf."""


class LoadPathInput(FrozenModel):
    session_id: str
    leaf_id: str
    agent: str
    reset_of: str | None = None  # as in EnsureSessionInput, echoed in PathInfo
    create_session: bool = False  # as in RunInput
    creation: bool = False
    """Answer the session record's ``created_at`` (a run whose memo lacks it: search.py)."""


class PathInfo(FrozenModel):
    """``load_path``'s answer: the repairs a run must store first, and the agent's tools."""

    repairs: list[Message]
    tools: list[ToolInfo]
    waiting: list[str] = Field(default_factory=list)
    """A tail turn whose calls wait for people (its reply and what follows it, encoded): the
    run waits on it instead of repairing it (docs/design.md#approvals-and-steering)."""
    approval_wait: float | None = 3600.0
    """The agent's wait for decisions, in seconds (a run's plain option overrides it)."""
    max_turns: int | None
    reset_of: str | None = None  # a reset of the whole run, recorded (activities.reset_steps)
    created_at: str | None = None
    """The session record's ``created_at`` (ISO), when asked and the store keeps records."""


class AppendInput(FrozenModel):
    session_id: str
    entries: list[str]
    """The stamped entries, encoded."""
    if_last: str | None = None
    """Store them only if the session's newest other entry is this one (``""``: none), else
    ``RunActiveError`` (a run started ``if_unchanged``; ``None``: unguarded)."""


class StoredTimes(FrozenModel):
    """The clock-derived fields of one appended entry, as written (RFC 3339 strings)."""

    created_at: str
    timestamp: str | None = None
    """A message entry's message timestamp."""

    @classmethod
    def of(cls, entry: Entry) -> StoredTimes:
        message = entry.message if isinstance(entry, MessageEntry) else None
        stamp = None if message is None or message.timestamp is None else message.timestamp
        return cls(
            created_at=format_time(entry.created_at),
            timestamp=None if stamp is None else format_time(stamp),
        )

    def on(self, entry: Entry) -> Entry:
        """``entry`` with these times (itself when they agree)."""
        if StoredTimes.of(entry) == self:
            return entry
        update: dict[str, Any] = {"created_at": parse_time(self.created_at)}
        if isinstance(entry, MessageEntry) and self.timestamp is not None:
            message = entry.message.model_copy(update={"timestamp": parse_time(self.timestamp)})
            update["message"] = message
        return entry.model_copy(update=update)


class AppendResult(FrozenModel):
    """What ``append_entries`` wrote, reduced to the fields that come from ``workflow.now()``.

    Recorded in history, so a workflow whose replay computed other times (a workflow task
    re-run after a server restart can see a different ``workflow.now()``) still reports the
    stored entries, not its recomputed ones. A few bytes per entry."""

    times: list[StoredTimes]


# -- the producers ---------------------------------------------------------------------------


class CallModelInput(FrozenModel):
    session_id: str
    leaf_id: str
    agent: str
    start_leaf_id: str
    """The run's starting leaf: the view is the history there plus this run's messages, as
    in-process (``session.views.run_view``)."""
    stamp: Header
    """The reply's entry header, reserved by the run: the activity commits the reply under it."""
    options: dict[str, Any] = Field(default_factory=dict)
    ephemeral: list[str] = Field(default_factory=list)
    """This run's ephemeral inputs (with their headers), encoded."""
    run_id: str = ""
    turn: int = 0
    """The run and the reply's turn (its model call's number in the run, from 1): the key its
    live deltas are published under; ``""``/``0`` publishes none. The call also stops when the
    run's cancel note appears (docs/design.md#cancellation)."""


class ModelReply(FrozenModel):
    """``call_model``'s answer: the reply as stored under the call's stamp, or the partial reply
    of a call the run's cancellation cut short."""

    entry: MessageEntry | None = None
    """The reply's entry as the store holds it (an earlier attempt's, if one stored first)."""
    aborted: Message | None = None
    """Instead of ``entry``: the partial reply (``stop_reason="aborted"``, unfinished tool
    calls removed), which the run's cancellation stores, as in-process."""
    cancelled: bool = False
    """With ``entry``: the run's cancellation arrived while the reply was being stored."""
    requests: list[ApprovalRequest] = Field(default_factory=list)
    """With ``entry``: the approval requests stored right after it
    (docs/design.md#approvals-and-steering)."""


class CallToolInput(FrozenModel):
    session_id: str
    agent: str
    call: dict[str, Any]
    """The ToolCall block, as JSON."""
    stamp: Header | None = None
    """The result's entry header: the activity commits the result under it (a call that runs
    alone); ``None`` for a parallel call, whose result the run commits with its batch."""
    run_id: str = ""
    """The run: the call stops when its cancel note appears (docs/design.md#cancellation)."""


class ToolReply(FrozenModel):
    """``call_tool``'s answer: the stamped result as stored, or a parallel call's bare result;
    neither when the run's cancel note stopped the tool (``cancelled``)."""

    entry: MessageEntry | None = None
    result: Message | None = None
    cancelled: bool = Field(default=False, exclude_if=lambda v: not v)


class SettleInput(FrozenModel):
    """``settle_stamp`` / ``settled_reply``: a producer the run gave up on, by its stamp. With
    ``message`` (a tool's failure result), store it under the stamp unless something is stored
    there already; without, only look the stamp up (docs/design.md#stamps-and-producers)."""

    session_id: str
    stamp: Header
    message: Message | None = None


class CancelNoteInput(FrozenModel):
    """``note_cancel``: the run whose calls in flight must stop."""

    session_id: str
    run_id: str


# -- compaction and lifecycle events --------------------------------------------------------


class SummarizeInput(FrozenModel):
    session_id: str
    agent: str
    leaf_id: str
    keep_turns: int = 0
    prompt: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class BodyRefs(FrozenModel):
    """The stored entries an event's message bodies are (see ``workflows.event_bodies``).

    A body named here may be left out of the event (``None``) in a query answer or a
    continue-as-new input; the client reads the entry from the store and puts it back."""

    entry_ids: list[str] | None = None
    """The receipt's entries (``WireEvent.entries``)."""
    message: str | None = None
    """``agent.message``: the entry holding that message."""
    result: str | None = None
    """``agent.result`` (``tool_execution_end``)."""
    args: str | None = None
    """``agent.args``: the assistant entry whose tool call ``agent.tool_call_id`` has them."""
    input: list[str] | None = None
    """``agent.input`` (``turn_start``), one entry per injected message."""


class _Positioned(FrozenModel):
    position: int


class WireEvent(EventFields[str], _Positioned):
    """An :class:`Event` with its position in the run and its entries encoded.

    Derived from :class:`EventFields`, so a field added to ``Event`` travels too. The wire
    order (``position`` first, ``refs`` last) is fixed by the base order and recorded in
    histories: ``tests/temporal/test_wire_event.py`` pins it."""

    refs: BodyRefs | None = None
    """Where the bodies are stored (receipts and events repeating a stored message)."""

    @field_serializer("agent", mode="wrap")
    def _agent_without_nulls(self, agent: AgentEvent | None, handler: Handler) -> Any:
        data = handler(agent)  # its unset fields left out (values inside them kept as they are)
        return {k: v for k, v in data.items() if v is not None} if data else data


_SHARED = tuple(name for name in EventFields.model_fields if name != "entries")
"""The fields ``Event`` and ``WireEvent`` hold alike, copied as they are."""


def event_to_wire(event: Event, position: int = 0) -> WireEvent:
    entries = None if event.entries is None else [encode_entry(e) for e in event.entries]
    shared = {name: getattr(event, name) for name in _SHARED}
    return WireEvent(position=position, entries=entries, **shared)


def event_from_wire(wire: WireEvent) -> Event:
    """The event ``wire`` encodes; its ``position`` and ``refs`` stay behind."""
    entries = None if wire.entries is None else [decode_entry(w) for w in wire.entries]
    return Event(entries=entries, **{name: getattr(wire, name) for name in _SHARED})


class PublishInput(FrozenModel):
    events: list[WireEvent]
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts())


# -- reset ------------------------------------------------------------------------------------


class KeepLeafInput(FrozenModel):
    session_id: str
    reset_of: str
    own_entry_ids: list[str]
    marker: Header
