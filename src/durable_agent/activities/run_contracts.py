"""What clients and operators exchange with the run and compaction workflows: their inputs,
results and query answers (docs/design.md#temporal). Activity arguments and results, and events
on the wire, are in :mod:`.contracts`; the same rules hold here: class and field names are the
payloads' JSON, recorded in histories (docs/design.md#versioning), and an operator types them in
the Temporal UI."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_serializer, model_validator
from pydantic import SerializationInfo as Info
from pydantic import SerializerFunctionWrapHandler as Handler

from ..ai.messages import Message, Usage
from ..durable.approvals import RunStatus
from ..session.approvals import PendingItem
from .contracts import FrozenModel, Timeouts, WireEvent

__all__ = [
    "CompactInput",
    "EventsAnswer",
    "InputEntry",
    "ResetNote",
    "RunInput",
    "RunResult",
    "RunState",
    "RunStatusName",
    "ToolCallRef",
]


class InputEntry(FrozenModel):
    """A run input: a message written as the plain message an operator types (``{"role": ...,
    "content": [...], "meta"?: true, "ephemeral"?: true}``), another entry encoded in ``wire``.

    ``id`` (a message's; an encoded entry carries its own) is the fresh ID its client chose,
    which the run keeps, so the client can tell the run's input in the store
    (docs/design.md#receipts); an operator's message may leave it out (the run draws one)."""

    wire: str = ""
    ephemeral: bool = False
    meta: bool = False
    message: Message | None = None
    id: str = ""

    @model_serializer(mode="wrap")
    def _as_plain(self, handler: Handler, info: Info) -> Any:
        data = handler(self)
        plain = data["message"] if self.message else {"wire": self.wire}
        named = {"id": self.id} if self.id and self.message else {}
        flags = {k: True for k in ("ephemeral", "meta") if getattr(self, k)}
        return {**named, **plain, **flags} if info.mode_is_json() else data

    @model_validator(mode="before")
    @classmethod
    def _from_plain(cls, data: Any) -> Any:
        """Read the plain form back: the ``send`` update's body is validated as it comes, not
        through the run input's reader, and a message's fields read as none would leave an
        empty ``wire`` the run cannot decode."""
        if not isinstance(data, dict) or "role" not in data or {"message", "wire"} & set(data):
            return data
        flags = {k: data[k] for k in ("id", "ephemeral", "meta") if k in data}
        message = {k: v for k, v in data.items() if k not in flags}
        if isinstance(message.get("content"), str):  # as an operator may type it
            message["content"] = [{"type": "text", "text": message["content"]}]
        return {**flags, "message": message}


class RunInput(FrozenModel):
    """Start (or continue) one run. ``leaf_id=None`` means the session's last appended entry."""

    session_id: str
    run_id: str = ""
    """``""`` (an operator's input): the run derives it from its workflow ID."""
    agent: str
    leaf_id: str | None = None
    create_session: bool = False  # create it if absent, after checking the agent
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
    """The last two turns' events without their message bodies (their ``refs`` name the
    stored entries), so this input stays a few KB whatever the messages."""
    ephemeral: list[str] = Field(default_factory=list)
    """This run's ephemeral input copies (with headers), for later model calls."""
    start_leaf_id: str | None = None
    """The leaf the run started from (set at first start, carried across continue-as-new)."""
    reset_of: str | None = None
    """An operator's reset of this run: the original execution (continue-as-new carries it)."""
    if_last: str | None = None
    """A run started ``if_unchanged``: the newest entry its client knew (``""``: none); its
    input is stored only if that is still the session's newest (``None``: unguarded)."""


RunStatusName = RunStatus


class ResetNote(FrozenModel):
    """A reset run's effect on the active branch (see ``activities.reset_steps``)."""

    of_run: str
    kept_leaf: str = ""
    marker_id: str = ""


class RunResult(FrozenModel):
    status: RunStatusName
    leaf_id: str
    new_entry_ids: list[str]
    usage: Usage
    turn_count: int
    reset: ResetNote | None = None  # only on a run an operator reset


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
    pending_approvals: list[PendingItem] = Field(default_factory=list)
    queued_inputs: int = 0

    @classmethod
    def refused(cls, run_id: str) -> RunState:
        """What a client shows of a run whose input was refused: it has no state (its query
        says so), only its ID and how its workflow closed."""
        return cls(
            session_id="",
            run_id=run_id,
            leaf_id="",
            status="failed",
            turn_count=0,
            pending_tool_calls=[],
            new_entry_ids=[],
            usage=Usage(),
        )


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
