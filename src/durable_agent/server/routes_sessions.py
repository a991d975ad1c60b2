"""The session routes: list, open-or-create, read, entries after a seq, delete, branch, fork,
compact."""

from __future__ import annotations

import json

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from ..durable.agent import new
from ..durable.errors import EntryNotFoundError
from ..session.errors import SessionExistsError
from ..session.ids import new_id
from ..session.store import RetentionStore, SessionRecord, Store, entries_after, last_entry
from .deps import (
    REFUSALS,
    SESSION_ID,
    Caller,
    SeqEntry,
    ServerDep,
    SessionId,
    WireEntry,
    answers,
    retention,
    runs,
    wire,
)
from .routes_runs import existing
from .runs import drop_made

__all__ = ["router", "session_object"]

router = APIRouter(prefix="/v1", tags=["sessions"], responses=REFUSALS)

MAX_PAGE = 1000
"""The most records or entries one request returns."""
PAGE_BYTES = 4 * 1_048_576
"""The most bytes an entries page answers, one entry at least (a client always moves on): a
thousand tool results near the entry limit would make one body of 1.5 GiB
(docs/design.md#http-api)."""
EMPTY_PAGE = len('{"entries":[],"more":false}')


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CreateSession(Body):
    session_id: str | None = Field(
        None, json_schema_extra=SESSION_ID, description="left out: the server picks one"
    )


class Branch(Body):
    entry_id: str


class Compact(Body):
    keep_turns: int = Field(
        0, ge=0, strict=True, description="the last turns kept as they are (0: summarize all)"
    )
    leaf_id: str | None = Field(None, description="compact the path to this entry (default: last)")
    agent: str | None = Field(None, description="whose model summarizes (default: the one agent)")


class Fork(Body):
    child_id: str | None = Field(
        None, json_schema_extra=SESSION_ID, description="left out: the server picks one"
    )
    leaf_id: str | None = Field(None, description="fork the path to this entry (default: last)")


class SessionObject(TypedDict):
    session_id: str
    parent_id: str | None
    """The session it was forked from."""
    created_at: str | None
    last_seq: int
    """The seq of its last entry (0: none): the stream's ``after`` to follow it from now."""
    leaf_id: str
    """Its last entry's ID (``""``: none)."""


class SessionListed(TypedDict):
    session_id: str
    parent_id: str | None
    created_at: str


class SessionPage(TypedDict):
    sessions: list[SessionListed]
    more: bool
    """Whether a page follows this one."""


class EntryPage(TypedDict):
    entries: list[SeqEntry]
    more: bool
    """Whether entries follow this page (read on after the last seq)."""


class Leaf(TypedDict):
    leaf_id: str


class Compacted(TypedDict):
    entry: WireEntry | None
    """The compaction entry stored (``None``: nothing to compact)."""


async def session_object(
    store: Store, session_id: str, record: SessionRecord | None = None
) -> SessionObject:
    """``{session_id, parent_id, created_at, last_seq, leaf_id}`` (404 for a missing session),
    reading the last entry alone; ``record``: the session's, if the caller has it (one it just
    created)."""
    if not isinstance(store, RetentionStore):
        record = None  # a store without records shows none, a created one's neither
    elif record is None:
        record = await store.load_session(session_id)
    seq, last = await last_entry(store, session_id) or (0, None)
    return {
        "session_id": session_id,
        "parent_id": record.parent_id if record else None,
        "created_at": record.created_at.isoformat() if record else None,
        "last_seq": seq,
        "leaf_id": last.id if last else "",
    }


@router.get("/sessions", **answers(200, SessionPage, 501))
async def list_sessions(
    srv: ServerDep,
    tenant: Caller,
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    offset: int = Query(0, ge=0),
) -> SessionPage:
    # the store filters by the tenant's prefix: no other tenant's record is read, so neither
    # the cost nor the latency of a page tells how many sessions others have; one more record
    # than the page says whether a page follows
    store = retention(srv)
    records = await store.list_sessions(limit=limit + 1, offset=offset, prefix=tenant.prefix)
    return {
        "sessions": [
            {"session_id": r.id, "parent_id": r.parent_id, "created_at": r.created_at.isoformat()}
            for r in records[:limit]
        ],
        "more": len(records) > limit,
    }


EXISTS = {200: {"model": SessionObject, "description": "the session exists already"}}


@router.post("/sessions", **answers(201, SessionObject, 413, 415, also=EXISTS))
async def create_session(
    srv: ServerDep, tenant: Caller, response: Response, body: CreateSession | None = None
) -> SessionObject:
    """Create the session (201), or answer the one that exists under the ID (200)."""
    given = body.session_id if body else None
    session_id = tenant.session(given) if given else tenant.session(tenant.prefix + new_id())
    record: SessionRecord | None = None
    try:
        record = await srv.store.create_session(session_id)
    except SessionExistsError:
        response.status_code = 200
    try:
        return await session_object(srv.store, session_id, record)
    except BaseException:  # refused: the session it made goes (docs/design.md#http-api)
        if record is not None:
            await drop_made(srv.store, session_id, "create", only_empty=True)
        raise


@router.get("/sessions/{session_id}", **answers(200, SessionObject))
async def get_session(session_id: SessionId, srv: ServerDep, tenant: Caller) -> SessionObject:
    return await session_object(srv.store, tenant.session(session_id))


@router.get("/sessions/{session_id}/entries", **answers(200, EntryPage))
async def get_entries(
    session_id: SessionId,
    srv: ServerDep,
    tenant: Caller,
    after: int = Query(0, ge=0),
    limit: int = Query(MAX_PAGE, ge=1, le=MAX_PAGE),
) -> EntryPage:
    """The entries after seq ``after``: at most ``limit`` of them and 4 MiB (one entry at
    least); ``more``: others follow, read on after the page's last seq."""
    # one more than the page: it says whether more follow, and the read stops there
    found = await entries_after(srv.store, tenant.session(session_id), after, limit + 1)
    page: list[SeqEntry] = []
    size = EMPTY_PAGE
    for seq, entry in found[:limit]:
        item: SeqEntry = {"seq": seq, "entry": wire(entry)}
        size += len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if page and size > PAGE_BYTES:
            break
        page.append(item)
    return {"entries": page, "more": len(found) > len(page)}


@router.delete("/sessions/{session_id}", **answers(204, None, 501))
async def delete_session(session_id: SessionId, srv: ServerDep, tenant: Caller) -> Response:
    """Deletes the session and stops its runs (each would otherwise go on calling the model
    until its next commit fails): those this process relays, and those Temporal lists; on
    Temporal, the session's workflow histories are deleted too (docs/design.md#retention)."""
    sid = tenant.session(session_id)
    await retention(srv).delete_session(sid)
    going = srv.hubs.deleted(sid)  # its streams learn it at once; its runs' text goes
    if srv.runs is not None:
        await srv.runs.session_deleted(sid, going)
    return Response(status_code=204)


@router.post("/sessions/{session_id}/branch", **answers(200, Leaf, 413, 415))
async def branch(session_id: SessionId, body: Branch, srv: ServerDep, tenant: Caller) -> Leaf:
    """The server keeps no leaf: this checks the entry and names it, for the next run's
    ``leaf_id``."""
    entries = await srv.store.load_entries(tenant.session(session_id))
    if body.entry_id and body.entry_id not in {e.id for e in entries}:
        raise EntryNotFoundError(f"entry {body.entry_id!r} is not in session {session_id!r}")
    return {"leaf_id": body.entry_id}


@router.post("/sessions/{session_id}/fork", **answers(201, SessionObject, 409, 413, 415))
async def fork(session_id: SessionId, body: Fork, srv: ServerDep, tenant: Caller) -> SessionObject:
    """A fork refused half-way leaves the child it made when the client named it (its retry
    completes it, docs/design.md#tree-and-views); one under an ID the server picked, which
    the client never learns, is deleted (docs/design.md#http-api)."""
    sid = tenant.session(session_id)
    child_id = tenant.session(body.child_id or tenant.prefix + new_id())
    handle = await new(None, store=srv.store, session_id=sid, create=False)  # else a 404
    if body.leaf_id is not None:
        await handle.branch(body.leaf_id)
    try:
        child = await handle.fork(child_id)
        return await session_object(srv.store, child.session_id)
    except BaseException:
        if body.child_id is None:
            await drop_made(srv.store, child_id, "fork", only_empty=False)
        raise


@router.post("/sessions/{session_id}/compact", **answers(200, Compacted, 409, 413, 415, 502))
async def compact(
    session_id: SessionId, body: Compact, srv: ServerDep, tenant: Caller
) -> Compacted:
    """Summarize the path into one stored compaction entry (docs/design.md#compaction), in this
    process or by the compaction workflow: ``{"entry": <entry wire object>}``, or ``{"entry":
    null}`` when there was nothing to compact. The entry then comes on the stream like any
    other. 409 while a run goes."""
    sid = await existing(srv, tenant.session(session_id))
    entry = await runs(srv).compact(sid, body.keep_turns, leaf_id=body.leaf_id, agent=body.agent)
    return {"entry": wire(entry) if entry else None}
