"""What people hand a running run on Temporal: the ``decide`` and ``send`` updates.

Both take plain JSON, so an operator can send them from the Temporal UI or ``temporal workflow
update execute`` (docs/design.md#approvals-and-steering):

- ``decide``: ``{"tool_call_id": "...", "approved": true, "reason": null, "args": null,
  "decided_by": "ops"}``, update ID ``decide:<tool_call_id>`` from an operator, the clients'
  ``decide:<tool_call_id>:<request entry ID>`` (a re-sent decision is one decision); answers
  the stored ``approval_decision`` entry, encoded as receipts carry entries.
- ``send``: ``{"text": "...", "when": "next_turn" | "at_end"}`` (or ``inputs``: one run-input
  message), optional ``message_id`` as its update ID; answers the stored user message once
  the run delivered it, or with ``"answer": "accepted"`` an empty string as soon as the run
  queued it (the HTTP API's way: the delivery is a receipt on the session's stream).

Validators refuse, with no history, what the run would not take: a body it cannot read, or an
empty message (``InvalidUpdateInput``), one over the payload limit (``PayloadTooLargeError``), a
call that is not pending in this run (``ApprovalNotPendingError``), a message for a run that
ended, is ending or was cancelled, or that already holds 16 (``RunNotAcceptingError``). The wait
itself is ``workflow.wait_condition`` with ``approval_wait`` as its timeout: one timer, no
activity, no history growth while nobody decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from ..activities.model_call import ActivityModel
from ..activities.run_contracts import InputEntry, RunInput, RunState, ToolCallRef
from ..ai.messages import Message, TextContent
from ..durable.approvals import not_pending
from ..durable.engine import RunEngine
from ..durable.errors import AgentError, InvalidRunInputError, RunNotAcceptingError
from ..durable.inbox import Inbox, When
from ..durable.inputs import EMPTY_MESSAGE, empty_message
from ..durable.limits import check_entry
from ..session.approvals import ApprovalDecision, ApprovalRequest
from ..session.codec import encode_entry
from ..session.entries import Entry, MessageEntry
from .run_input import INVALID_UPDATE_INPUT, input_entry

__all__ = [
    "DecideBody",
    "run_state",
    "SendBody",
    "TemporalGate",
    "accepted",
    "check_decision",
    "check_message",
    "decision_of",
    "delivered",
    "message_of",
]


class DecideBody(BaseModel):
    """The ``decide`` update's argument (plain JSON)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_call_id: str
    approved: bool
    reason: str | None = None
    args: dict[str, Any] | None = None
    decided_by: str | None = None
    request_id: str | None = None
    """The request entry the decision answers (the clients send it; optional): a call ID the
    model uses again in a later turn of the run is another call, told apart by it."""


class SendBody(BaseModel):
    """The ``send`` update's argument (plain JSON): ``text``, or one message in ``inputs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = None
    inputs: list[InputEntry] = Field(default_factory=list)
    when: When = "next_turn"
    message_id: str | None = None
    """The update ID the client used (informational: Temporal dedups by the update ID)."""
    answer: Literal["delivered", "accepted"] = "delivered"
    """When the update answers: with the stored message once delivered, or at once, empty."""


class TemporalGate:
    """The run workflow's gate: the model call evaluated the rules on the worker and stored the
    requests with the reply; the wait is ``workflow.wait_condition``."""

    def __init__(self, model: ActivityModel, approval_wait: float | None) -> None:
        self.approval_wait = approval_wait
        self._model = model

    async def needs_approval(self, reply: Message) -> list[str]:
        # the model call asked already: its requests are recorded at the reply's receipt
        return []

    def stored_requests(self) -> list[ApprovalRequest]:
        taken, self._model.requests = self._model.requests, []
        return taken

    async def wait(self, ready: Callable[[], bool], seconds: float | None) -> bool:
        timeout = None if seconds is None else timedelta(seconds=seconds)
        try:
            await workflow.wait_condition(ready, timeout=timeout, timeout_summary="approval_wait")
        except TimeoutError:
            return ready()
        return True


def refusal(exc: AgentError) -> ApplicationError:
    """``exc`` as an update failure the client re-raises as the same error type (an invalid
    input's field as its detail)."""
    details = [exc.field] if isinstance(exc, InvalidRunInputError) else []
    return ApplicationError(str(exc), *details, type=type(exc).__name__, non_retryable=True)


def check_decision(engine: RunEngine | None, inbox: Inbox, body: DecideBody) -> None:
    """The ``decide`` validator: the run waits, or will wait, for this call and nothing decided
    it yet. While the run cannot know what it will ask (its start step has not loaded the
    session, or a model call is in flight or its result not processed yet: the call stores its
    reply and requests before the run sees them, and a client may decide at once), a call it
    has not asked about is taken for the wait that reply may start, which checks it
    (docs/design.md#approvals-and-steering)."""
    call_id = body.tool_call_id
    try:
        # held to the payload limit as a message is: the handler's store would refuse it, and
        # that failed the run
        check_entry(decision_of(body, workflow.now()), "approval decision")
        if inbox.closed_because is not None:
            raise not_pending(call_id, None)
        if engine is None:
            return
        waiting = engine.waiting  # the turn it waits on, or its last (every call decided)
        request = None if waiting is None else waiting.turn.requests.get(call_id)
        asked = request is not None and body.request_id in (None, request.id)
        if engine.status == "calling_model" and not asked and not inbox.deciding(call_id):
            return
        if waiting is None or (request is not None and not asked):  # another call of the ID
            raise not_pending(call_id, None if waiting is None else waiting.decided().get(call_id))
        waiting.check(call_id, inbox.deciding(call_id))
    except AgentError as exc:
        raise refusal(exc) from None


def check_message(inbox: Inbox, cancelled: bool, message: MessageEntry) -> None:
    """The ``send`` validator, of the message :func:`message_of` read: one the run can store
    (as the HTTP API and ``stream.send`` check it: an update sent by hand is checked too), and
    the run takes it."""
    if cancelled:
        raise refusal(RunNotAcceptingError("the run takes no more messages: it was cancelled"))
    try:
        check_entry(message, "message")
        inbox.check_message()
    except AgentError as exc:
        raise refusal(exc) from None


def decision_of(body: DecideBody, now: datetime) -> ApprovalDecision:
    return ApprovalDecision(
        tool_call_id=body.tool_call_id,
        approved=body.approved,
        reason=body.reason,
        args=body.args,
        decided_by=body.decided_by,
        created_at=now,  # never the default clock in workflow code
    )


def message_of(body: SendBody, now: datetime) -> MessageEntry:
    """The user message a ``send`` delivers; ``InvalidUpdateInput`` for a body without one, or
    with an empty one (as the HTTP API refuses it: the run would store it as is)."""
    entry: Entry | None = None
    field = "text"
    if body.text is not None and not body.inputs:
        message = Message(role="user", content=[TextContent(text=body.text)], timestamp=now)
        entry = MessageEntry(message=message, created_at=now)
    elif body.text is None and len(body.inputs) == 1:
        field = "inputs[0].content"
        try:
            entry = input_entry(body.inputs[0], now)
        except ValueError as exc:  # EntryDecodeError: the wire is not an entry
            raise bad_send("inputs[0].wire", str(exc)) from None
    if not isinstance(entry, MessageEntry) or entry.ephemeral:
        raise bad_send("", "send takes text or one (non-ephemeral) message in inputs")
    if empty_message(entry.message):
        raise bad_send(field, EMPTY_MESSAGE)
    return entry.model_copy(update={"id": "", "created_at": now})


def bad_send(field: str, problem: str) -> ApplicationError:
    text = "invalid send input: " + (f"{field}: {problem}" if field else problem)
    return ApplicationError(text, type=INVALID_UPDATE_INPUT, non_retryable=True)


def accepted(done: asyncio.Future[Entry]) -> str:
    """The update's answer at once: the message is queued; a failure to deliver it later (the
    run parked or failed first) is logged, as the HTTP API learns of delivery from the store."""

    def undelivered(done: asyncio.Future[Entry]) -> None:
        if not done.cancelled() and done.exception() is not None:
            workflow.logger.info("a message was not delivered: %s", done.exception())

    done.add_done_callback(undelivered)
    return ""


async def delivered(done: asyncio.Future[Entry]) -> str:
    """The update's answer: the stored entry, encoded; the run's refusal as an update failure."""
    try:
        return encode_entry(await done)
    except AgentError as exc:
        raise refusal(exc) from None


def run_state(inp: RunInput, engine: RunEngine | None, inbox: Inbox) -> RunState:
    """The run workflow's ``state()`` answer (with what waits for people and what is queued)."""
    if engine is None:
        return RunState(
            session_id=inp.session_id,
            run_id=inp.run_id,
            leaf_id=inp.leaf_id or "",
            status="starting",
            turn_count=inp.turn_count,
            pending_tool_calls=[],
            new_entry_ids=list(inp.new_entry_ids),
            usage=inp.usage,
            queued_inputs=len(inbox.messages),
        )
    return RunState(
        session_id=inp.session_id,
        run_id=inp.run_id,
        leaf_id=engine.leaf_id,
        status=engine.status,
        turn_count=engine.turn_count,
        pending_tool_calls=[ToolCallRef(id=c.id, name=c.name) for c in engine.pending_calls],
        new_entry_ids=list(engine.new_entry_ids),
        usage=engine.usage,
        pending_approvals=[] if engine.waiting is None else engine.waiting.turn.pending(),
        queued_inputs=len(inbox.messages),
    )
