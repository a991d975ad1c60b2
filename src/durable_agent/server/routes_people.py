"""The routes where people reach a run: messages into the running run, and the decisions on
the tool calls that wait for them (docs/design.md#http-api, #approvals-and-steering)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict

from ..durable.inbox import When
from ..durable.inputs import check_run_input, text
from ..durable.limits import check_entry
from ..session.approvals import ApprovalDecision, PendingItem, pending_in
from ..session.ids import CLIENT_ID
from .deps import REFUSALS, Caller, ServerDep, SessionId, WireEntry, answers, runs, wire
from .routes_runs import existing

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["people"], responses=REFUSALS)


class SendMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    when: When = "next_turn"
    message_id: str | None = Field(default=None, pattern=CLIENT_ID)
    """The client's ID for the message: the same message sent again (a retried request) is
    handed to the run once (a new 16-hex ID when left out)."""


class Decide(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    approved: bool
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments the approved call runs with (``None``: as the model gave them)."""

    @model_validator(mode="after")
    def _args_only_approved(self) -> Decide:
        if self.args is not None and not self.approved:  # as the CLI's deny refuses --args
            raise ValueError("args: a denied call does not run (send args with approved true)")
        return self


class Accepted(TypedDict):
    message_id: str
    run_id: str
    """The run that took the message."""


class Pending(TypedDict):
    pending: list[PendingItem]


@router.post("/sessions/{session_id}/messages", **answers(202, Accepted, 409, 413, 415))
async def send_message(
    session_id: SessionId, body: SendMessage, srv: ServerDep, tenant: Caller
) -> Accepted:
    """Into the session's running run; 202 once it accepted the message, whose delivery is a
    receipt on the stream (a steer after the turn's tool results, a follow-up at the end)."""
    sid = await existing(srv, tenant.session(session_id))
    entry = text(body.text)
    check_entry(entry, "message")
    check_run_input([entry], nothing_stored=False)  # a blank one: the run would store it as is
    run_id, message_id = await runs(srv).send(sid, entry, body.when, body.message_id)
    return {"message_id": message_id, "run_id": run_id}


@router.get("/sessions/{session_id}/approvals", **answers(200, Pending))
async def pending(session_id: SessionId, srv: ServerDep, tenant: Caller) -> Pending:
    """The calls of the session's active path (to its last entry) that wait for a decision."""
    return {"pending": await pending_in(srv.store, tenant.session(session_id))}


@router.post(
    "/sessions/{session_id}/approvals/{tool_call_id}", **answers(200, WireEntry, 409, 413, 415)
)
async def decide(
    session_id: SessionId, tool_call_id: str, body: Decide, srv: ServerDep, tenant: Caller
) -> WireEntry:
    """Decide a pending call as the caller's principal; the stored decision entry. The run
    that asked takes it wherever it runs, else it waits in the store for the next run."""
    sid = await existing(srv, tenant.session(session_id))
    decision = ApprovalDecision(
        tool_call_id=tool_call_id,
        approved=body.approved,
        reason=body.reason,
        args=body.args,
        decided_by=tenant.principal,
    )
    entry, _ = await runs(srv).decide(sid, decision)
    return wire(entry)
