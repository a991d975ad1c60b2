"""The run routes (start, cancel, status) and the session stream."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, NotRequired

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sse_starlette import EventSourceResponse
from typing_extensions import TypedDict

from ..durable.errors import EntryNotFoundError
from ..durable.inbox import When
from ..durable.inputs import check_run_input, text
from ..durable.limits import check_entry
from ..session.approvals import ApprovalDecision, ApprovalRequest
from ..session.codec import wire_to_entry
from ..session.entries import Entry, MessageEntry
from ..session.errors import EntryDecodeError, SessionNotFoundError
from ..session.ids import CLIENT_ID
from ..session.store import RetentionStore, entries_after, last_entry
from .app import Server
from .deps import REFUSALS, Caller, ServerDep, SessionId, answers, runs
from .runs import OnBusy, RunFailure, Runs, Status
from .sse import REPLAY_PAGE, session_stream

__all__ = ["existing", "router"]

router = APIRouter(prefix="/v1", tags=["runs"], responses=REFUSALS)


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | None = None
    inputs: list[dict[str, Any]] | None = None
    """Entries in their wire form (``{"type": "message", "message": {...}}``)."""
    leaf_id: str | None = None
    agent: str | None = None
    on_busy: OnBusy = "reject"
    run_id: str | None = Field(default=None, pattern=CLIENT_ID)
    """The client's ID for the run: a retried request with the same ID starts nothing and
    answers the run the first one started (a new 16-hex ID when left out)."""

    @model_validator(mode="after")
    def _one_input(self) -> StartRun:
        if (self.text is None) == (self.inputs is None):
            raise ValueError("give text or inputs (one of them)")
        return self

    def entries(self) -> list[Entry]:
        if self.text is not None:
            return [text(self.text)]
        entries = [wire_to_entry(i) for i in self.inputs or []]
        for number, entry in enumerate(entries):
            # a decision's decided_by is the caller's principal, a request a call a model made
            # (docs/design.md#approvals-and-steering): neither is the client's to write
            if isinstance(entry, ApprovalRequest | ApprovalDecision):
                raise EntryDecodeError(
                    f"inputs[{number}]: {entry.kind} entries are stored by runs and the "
                    "approvals route (POST .../approvals/{tool_call_id}), not given as inputs"
                )
        return entries


class RunStarted(TypedDict):
    run_id: str
    message_id: NotRequired[str]
    """Set when ``on_busy`` made the input a message into the run going (``run_id``)."""


class RunStatus(TypedDict):
    run_id: str
    status: Status
    error: NotRequired[RunFailure | None]
    """Why a failed run failed (``None``: the server no longer knows)."""


class ActiveRuns(TypedDict):
    active: list[str]


@router.post("/sessions/{session_id}/runs", **answers(202, RunStarted, 409, 413, 415))
async def start_run(
    session_id: SessionId, body: StartRun, srv: ServerDep, tenant: Caller
) -> RunStarted:
    sid = tenant.session(session_id)
    entries = body.entries()
    for entry in entries:
        check_entry(entry, "input entry")
    # refused here, not by the run: its start creates the session first (a refused request
    # stores nothing), and a message into a running run is never checked by one
    check_run_input(entries, nothing_stored=not entries and await _nothing_at(srv, sid, body))
    started = runs(srv)
    if body.on_busy in ("next_turn", "at_end") and await started.active(sid):
        if body.run_id is not None and await started.has(sid, body.run_id):
            return {"run_id": body.run_id}  # a retried start whose run goes: not a message
        # the request's own ID names the message: sent again, it is handed on once
        return await _deliver(started, sid, entries, body.on_busy, body.run_id)
    if body.leaf_id:  # a new session has no entry to run from: refused before it is created
        await _from_stored(srv, sid, body.leaf_id)
    # a retried start (``run_id`` named a run already) is answered by ``start`` itself
    run_id = await started.start(
        sid,
        entries,
        leaf_id=body.leaf_id,
        agent=body.agent,
        on_busy=body.on_busy,
        run_id=body.run_id,
    )
    return {"run_id": run_id}


async def _deliver(
    into: Runs, session_id: str, entries: list[Entry], when: When, message_id: str | None
) -> RunStarted:
    """``on_busy`` ``next_turn``/``at_end`` with a run going: the input is a message into it."""
    if len(entries) != 1 or not isinstance(entries[0], MessageEntry):
        raise ValueError("a message into the running run is one message: give text")
    run_id, message_id = await into.send(session_id, entries[0], when, message_id)
    return {"run_id": run_id, "message_id": message_id}


async def _nothing_at(srv: Server, session_id: str, body: StartRun) -> bool:
    """Whether the run's leaf (``leaf_id``, else the session's last entry) is the empty root:
    a run without input would have nothing to answer."""
    if body.leaf_id is not None:
        return body.leaf_id == ""
    try:
        return await last_entry(srv.store, session_id) is None
    except SessionNotFoundError:
        return True


async def _from_stored(srv: Server, session_id: str, leaf_id: str) -> None:
    """A run from ``leaf_id`` needs the session (a run's start creates it: a refused request
    stores nothing); the entry itself is checked as the run branches to it."""
    try:
        await existing(srv, session_id)
    except SessionNotFoundError:
        raise EntryNotFoundError(
            f"entry {leaf_id!r} is not a stored entry of session {session_id!r}"
        ) from None


async def existing(srv: Server, session_id: str) -> str:
    """``session_id`` if the store has it (else 404, before anything else is asked)."""
    await created_at(srv, session_id)
    return session_id


async def created_at(srv: Server, session_id: str) -> datetime | None:
    """The session's ``created_at`` (``None``: a store without records), else 404."""
    store = srv.store
    if isinstance(store, RetentionStore):
        return (await store.load_session(session_id)).created_at
    await store.load_entries(session_id)
    return None


@router.post("/sessions/{session_id}/runs/{run_id}/cancel", **answers(202, RunStarted))
async def cancel_run(
    session_id: SessionId, run_id: str, srv: ServerDep, tenant: Caller
) -> RunStarted:
    await runs(srv).cancel(await existing(srv, tenant.session(session_id)), run_id)
    return {"run_id": run_id}


@router.get("/sessions/{session_id}/runs/{run_id}", **answers(200, RunStatus))
async def run_status(
    session_id: SessionId, run_id: str, srv: ServerDep, tenant: Caller
) -> RunStatus:
    """The run's status; a failed run's also says why (``error``: type and message)."""
    sid = await existing(srv, tenant.session(session_id))
    status = await runs(srv).status(sid, run_id)
    if status != "failed":
        return {"run_id": run_id, "status": status}
    failure = await runs(srv).failure(sid, run_id)
    return {"run_id": run_id, "status": status, "error": failure}


@router.get("/sessions/{session_id}/runs", **answers(200, ActiveRuns))
async def active_runs(session_id: SessionId, srv: ServerDep, tenant: Caller) -> ActiveRuns:
    sid = await existing(srv, tenant.session(session_id))
    return {"active": await runs(srv).active(sid)}


SEQ = re.compile(r"[0-9]{1,18}")
"""A seq as ``Last-Event-ID`` gives it (ASCII digits: ``str.isdigit`` takes ``²`` too)."""


class InvalidLastEventIdError(ValueError):
    """``Last-Event-ID`` is not the seq of an entry."""


def _event(name: str, data: dict[str, Any], about: str) -> dict[str, Any]:
    """One event of the stream as OpenAPI 3.2's ``itemSchema`` of ``text/event-stream`` says it
    (FastAPI's own form): its name, and the JSON its ``data`` holds."""
    content = {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
    props = {"event": {"const": name}, "data": content, "id": {"type": "string"}}
    return {
        "type": "object",
        "description": about,
        "required": ["event", "data"],
        "properties": props,
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


STREAM_EVENTS = [
    _event("entry", _ref("SeqEntry"), "an entry stored (a receipt); its id is its seq"),
    _event(
        "delta",
        {
            "type": "object",
            "required": ["run_id", "entry_parent", "text", "restart"],
            "properties": {
                "run_id": {"type": "string"},
                "entry_parent": {"type": "string"},
                "text": {"type": "string"},
                "restart": {"type": "boolean"},
            },
        },
        "live text of the reply that will hang off entry_parent, not stored; on restart, "
        "drop what the run's earlier deltas showed first",
    ),
    _event("run", _ref("RunStatus"), "a run started, waits for people or ended"),
    _event(
        "deleted",
        {
            "type": "object",
            "required": ["session_id"],
            "properties": {"session_id": {"type": "string"}},
        },
        "the session was deleted; the stream ends",
    ),
]
"""The stream's events (docs/design.md#http-api): a client generator or reader finds them in
the document; comment lines (``: live`` once what a join sends is sent, keep-alives) carry
no data."""


@router.get(
    "/sessions/{session_id}/stream",
    response_class=StreamingResponse,  # the route answers its own; this one names no type
    **answers(200, None),
    openapi_extra={
        "responses": {
            "200": {
                "description": "the session's entries after the seq given, then live",
                "content": {"text/event-stream": {"itemSchema": {"oneOf": STREAM_EVENTS}}},
            }
        }
    },
)
async def stream(
    session_id: SessionId,
    srv: ServerDep,
    tenant: Caller,
    after: int | None = Query(None, ge=0),
    last_event_id: str | None = Header(None),
) -> EventSourceResponse:
    sid = tenant.session(session_id)
    if last_event_id is not None:
        if not SEQ.fullmatch(last_event_id):
            raise InvalidLastEventIdError(
                "Last-Event-ID is the seq of the last entry seen (an integer, 0 or more)"
            )
        after = int(last_event_id)
    born = await created_at(srv, sid)  # 404 before any byte
    if not after:
        return session_stream(srv.hubs, sid, after, srv.keepalive, born=born)
    # the entry at ``after`` and those after it: none, and ``after`` is no seq of this session
    # (another's, or one deleted since): resuming there would show nothing until the session
    # grew past it, and the session's hub, if it started there, would show no stream anything
    found = await entries_after(srv.store, sid, after - 1, REPLAY_PAGE + 1)
    if not found:
        raise InvalidLastEventIdError(
            f"seq {after} is past the last entry of session {sid!r}: resume at the seq of an "
            "entry of this session (0: from its start)"
        )
    return session_stream(srv.hubs, sid, after, srv.keepalive, found[1:], born)
