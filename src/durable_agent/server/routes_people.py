"""The routes where people reach a run: messages into the running run, and the decisions on
the tool calls that wait for them (docs/design.md#http-api, #approvals-and-steering)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ..durable.inbox import When
from ..durable.inputs import check_run_input, text
from ..durable.limits import check_entry
from ..session.approvals import ApprovalDecision, pending_items
from ..session.codec import entry_to_wire
from ..session.tree import path
from .deps import Caller, ServerDep, runs
from .routes_runs import CLIENT_ID, existing

__all__ = ["router"]

router = APIRouter(prefix="/v1")


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


@router.post("/sessions/{session_id}/messages", status_code=202)
async def send_message(
    session_id: str, body: SendMessage, srv: ServerDep, tenant: Caller
) -> dict[str, str]:
    """Into the session's running run; 202 once it accepted the message, whose delivery is a
    receipt on the stream (a steer after the turn's tool results, a follow-up at the end)."""
    sid = await existing(srv, tenant.session(session_id))
    entry = text(body.text)
    check_entry(entry, "message")
    check_run_input([entry], nothing_stored=False)  # a blank one: the run would store it as is
    run_id, message_id = await runs(srv).send(sid, entry, body.when, body.message_id)
    return {"message_id": message_id, "run_id": run_id}


@router.get("/sessions/{session_id}/approvals")
async def pending(session_id: str, srv: ServerDep, tenant: Caller) -> dict[str, Any]:
    """The calls of the session's active path (to its last entry) that wait for a decision."""
    entries = await srv.store.load_entries(tenant.session(session_id))
    items = pending_items(path(entries, entries[-1].id)) if entries else []
    return {"pending": [i.model_dump(mode="json") for i in items]}


@router.post("/sessions/{session_id}/approvals/{tool_call_id}")
async def decide(
    session_id: str, tool_call_id: str, body: Decide, srv: ServerDep, tenant: Caller
) -> dict[str, Any]:
    """Decide a pending call as the caller's principal; the stored decision entry. The run
    that asked takes it wherever it runs, else it waits in the store for the next run."""
    sid = await existing(srv, tenant.session(session_id))
    decision = ApprovalDecision(
        tool_call_id=tool_call_id,
        approved=body.approved,
        reason=body.reason,
        args=body.args if body.approved else None,
        decided_by=tenant.principal,
    )
    entry = await runs(srv).decide(sid, decision)
    return entry_to_wire(entry)
