"""The session stream: replay from the store after the client's last seq, then live.

``GET /v1/sessions/{id}/stream`` with ``Last-Event-ID: N`` (wins) or ``?after=N`` (neither: from
now). The store is the stream's buffer: the replay reads the entries after ``N`` from the store
(``load_entries_after``, reading only what follows ``N``, :data:`REPLAY_PAGE` at a time: a long
session of big tool results is never held whole), then the client joins its session's shared
hub (:mod:`.hub`), sends the status of the runs going, its replay's last page, the entries
stored while it joined (one more read), and takes the hub's frames, skipping any entry seq it
already sent. A replay's full pages go before the join (they fill no hub queue), so only a
replay longer than a page shows its run frames after some of its entries. So a client that
comes back an hour later, after the run ended, continued-as-new or moved workers, gets exactly
the entries it missed, each once, in seq order, and goes live: the comment ``: live`` marks
that point, from which the stream tells every change (a run's end that came before it, the
stream does not tell: a client that started a run before it asks for the run's status).
Disconnecting never cancels a run (docs/design.md#http-api).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextvars import ContextVar
from datetime import datetime

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionNotFoundError, StoreUnavailableError
from ..session.store import entries_after, last_entry
from .hub import Frame, entry_frame
from .hubs import Hubs

__all__ = ["KEEPALIVE", "LIVE", "REPLAY_PAGE", "PacedStream", "Replay", "session_stream"]

logger = logging.getLogger("durable_agent.server")

Replay = list[tuple[int, Entry]]
"""Entries with their seqs, as ``entries_after`` reads them."""

KEEPALIVE = 15.0
"""Seconds between two comment lines on an idle stream (proxies close silent connections)."""

SEND_TIMEOUT = 30.0
"""Seconds the stream waits for a client to take :data:`PIECE` more bytes before it drops the
client as one that stopped reading."""

PIECE = 65_536
"""Bytes a frame is written in: the send timeout is per piece, so a client that reads a frame
of megabytes slowly but steadily (a slow link) is not taken for one that stopped."""


REPLAY_PAGE = 100
"""Entries a stream's replay reads from the store at a time."""

LIVE = Frame("", {})
"""What a join sends is sent: sent as the comment ``: live`` (module doc)."""


def _event(frame: Frame) -> ServerSentEvent:
    if frame is LIVE:
        return ServerSentEvent(comment="live")
    data = json.dumps(frame.data, ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(
        data=data, event=frame.event, id=None if frame.id is None else str(frame.id)
    )


def _replied(entries: Replay) -> set[str]:
    """The entries that a reply among ``entries`` hangs off (stored: no partial text of it)."""
    return {
        e.parent_id or ""
        for _, e in entries
        if isinstance(e, MessageEntry) and e.message.role == "assistant"
    }


async def frames(
    hubs: Hubs,
    session_id: str,
    after: int | None,
    replay: Replay | None = None,
    born: datetime | None = None,
) -> AsyncIterator[Frame]:
    """What one client receives (module doc); ends when the session is deleted. ``replay``:
    the first :data:`REPLAY_PAGE` entries after ``after`` at most, if the route read them
    already; ``born``: the session's ``created_at``, if the route read its record (the hub need
    not read it again)."""
    store = hubs.store
    if after is None:  # from now: after the last entry, read alone
        after = (await last_entry(store, session_id) or (0, None))[0]
    if replay is None:
        replay = await entries_after(store, session_id, after, REPLAY_PAGE)
    replied: set[str] = set()
    while len(replay) >= REPLAY_PAGE:  # a long replay goes before the join, fills no hub queue
        for seq, entry in replay:
            after = seq
            yield entry_frame(seq, entry)
        replied |= _replied(replay)
        replay = await entries_after(store, session_id, after, REPLAY_PAGE)
    last = replay[-1][0] if replay else after
    hub = await hubs.hub(session_id, last, born)
    queue, runs, pieces = hub.join()
    try:
        for frame in runs:  # before the replay's last page (all of a short one's)
            yield frame
        caught = await entries_after(store, session_id, last)
        for seq, entry in [*replay, *caught]:
            if seq > after:
                after = seq
                yield entry_frame(seq, entry)
        replied |= _replied(replay) | _replied(caught)
        for piece in pieces:  # a reply stored since its run's stream gave the text: none
            if piece.entry_parent not in replied:
                yield Frame("delta", piece.data())
        yield LIVE
        while True:
            item = await queue.get()
            if item.event == "gone":  # the client comes back (a reload, Last-Event-ID)
                return
            if item.id is not None:
                if item.id <= after:
                    continue
                after = item.id
            yield item
            if item.event == "deleted":
                return
    finally:
        hub.leave(queue)


_DROPPED: ContextVar[bool] = ContextVar("durable_agent_stream_dropped", default=False)
"""Set in the request's task when its stream dropped a stalled client (read by the filter)."""


def _not_dropped(record: logging.LogRecord) -> bool:
    """uvicorn's error line for a response left unfinished, unless it is a dropped stream's:
    that one is said already, and the server cannot finish a response nobody reads."""
    return not (_DROPPED.get() and record.getMessage().startswith("ASGI callable returned"))


logging.getLogger("uvicorn.error").addFilter(_not_dropped)


def _paced(send: Send) -> Send:
    """``send`` one message at a time (a keep-alive waits for the frame being written, never
    lands inside it), a body in :data:`PIECE`-byte pieces each given :data:`SEND_TIMEOUT`: a
    send waits for what was written before it to drain, so a timeout over a whole frame would
    drop a client that is reading it, only slowly."""
    lock = anyio.Lock()

    async def within(message: Message) -> None:
        with anyio.move_on_after(SEND_TIMEOUT) as scope:
            await send(message)
        if scope.cancel_called:
            raise SendTimeoutError()

    async def paced(message: Message) -> None:
        body: bytes = message.get("body", b"")
        async with lock:
            if message["type"] != "http.response.body" or len(body) <= PIECE:
                await within(message)
                return
            for start in range(0, len(body), PIECE):
                more = start + PIECE < len(body) or message.get("more_body", False)
                await within({**message, "body": body[start : start + PIECE], "more_body": more})

    return paced


class PacedStream(EventSourceResponse):
    """A stream (the session stream, an AG-UI run's) that drops a client that stopped reading
    after :data:`SEND_TIMEOUT` without progress (:func:`_paced`): an ordinary event (a laptop
    lid closed, a proxy stalled) worth one line, not the traceback the timeout would reach the
    server's log with. Its events' generator is closed (its ``finally`` leaves the hub); the
    runs it showed go on."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, _paced(send))
        except SendTimeoutError:
            _DROPPED.set(True)  # the server's task: uvicorn logs in it once this returns
            logger.info(
                "%s: dropped a client that stopped reading (a frame waited %ss)",
                scope.get("path", "stream"),
                SEND_TIMEOUT,
            )


def session_stream(
    hubs: Hubs,
    session_id: str,
    after: int | None,
    keepalive: float = KEEPALIVE,
    replay: Replay | None = None,
    born: datetime | None = None,
) -> EventSourceResponse:
    async def events() -> AsyncIterator[ServerSentEvent]:
        try:
            async for frame in frames(hubs, session_id, after, replay, born):
                yield _event(frame)
        except SessionNotFoundError:
            # deleted between the route's check (404 before any byte) and the stream's first
            # read: the headers are sent, so it ends as a delete seen live ends it
            yield _event(Frame("deleted", {"session_id": session_id}))
        except StoreUnavailableError as exc:
            # the headers are sent: no 503 now. The stream ends and its client comes back with
            # Last-Event-ID (the chat page does); an outage is worth one line, not a traceback
            logger.warning("stream of %s ended: %s", session_id, " ".join(str(exc).split()))

    return PacedStream(events(), ping=max(1, int(keepalive)))
