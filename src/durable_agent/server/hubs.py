"""The session hubs of one server process (:class:`Hubs`), by session: it starts a hub for the
first stream of a session and hears the runs this process started (a
:class:`~.runs.RunListener`, told by each run's :class:`~.relay.RunRelay`): their status, their
live text, and the entries they stored, which wake the session's hub to read them
(docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime

from ..session.deltas import LiveStore
from ..session.errors import SessionNotFoundError
from ..session.store import RetentionStore, Store, entries_after
from ..workflows.search import creation_when_asked, ended_runs
from .hub import SessionHub
from .runs import RunFailure, Runs, Status
from .temporal_runs import TemporalRuns
from .watch import Piece, grown

__all__ = ["Hubs"]

ENDS = ("completed", "failed", "cancelled")


class Hubs:
    """The hubs of this process, by session; hears the runs of this process."""

    def __init__(self, store: Store, runs: Runs | None) -> None:
        self.store = store
        self.runs = runs
        self.channel = store.live_deltas() if isinstance(store, LiveStore) else None
        self.hubs: dict[str, SessionHub] = {}
        self.ended: dict[tuple[str, str], str] = {}
        """(session, run) -> how it ended, for runs seen ending (not announced twice). By
        session: a run ID is the client's to choose, and names another run in another session
        (or in the session created again under a deleted one's ID)."""
        self.shown: dict[tuple[str, str], Piece] = {}
        """(session, run) -> the text the streaming reply of a run this process relays showed
        so far, kept with no hub too: a hub that starts mid-reply shows it whole, though the
        run's stream read no live text while no hub was there (or read some for a hub gone)."""
        self.going: dict[str, set[str]] = {}
        """Session -> the runs this process relays that have not ended."""
        self.dropped: set[tuple[str, str]] = set()
        """(session, run) of runs going when their session was deleted: until they end (at
        their next commit), their live text is dropped, not kept for a session created again
        under the ID."""

    async def hub(self, session_id: str, after: int, born: datetime | None = None) -> SessionHub:
        """The session's hub, started following after seq ``after`` if it is new, or if the one
        there follows the session deleted and created again under its ID (its next reads would
        tell, late for a session still shorter than its cursor: docs/design.md#http-api).
        ``born``: the session's ``created_at`` as the caller just read it (else read here)."""
        hub = self.hubs.get(session_id)
        if hub is not None and hub.follower.born and isinstance(self.store, RetentionStore):
            with contextlib.suppress(SessionNotFoundError):  # gone: the hub's next read tells
                now = born or (await self.store.load_session(session_id)).created_at
                if now != hub.follower.born and self.hubs.get(session_id) is hub:
                    hub.created_again()
            hub = self.hubs.get(session_id)
        if hub is None:
            hub = SessionHub(self, session_id, after, born)
            self.hubs[session_id] = hub
            for (sid, run_id), shown in self.shown.items():
                if sid == session_id:
                    hub.partial[run_id] = shown
            try:
                hub.leaf = hub.reads.first_leaf = await _leaf(self.store, session_id, after)
                await hub.look()
            except BaseException:  # the session deleted, the store down, the request gone:
                # no hub that never reads stays for the session's next streams
                hub.close("StreamFailed")
                raise
            hub.task = asyncio.create_task(hub.run())
        return hub

    async def found(
        self, session_id: str, born: datetime | None, since: datetime
    ) -> list[tuple[str, str]]:
        """The session's runs going, any server's; on Temporal also those that ended since
        ``since`` (a hub's start): one another replica started that ended before Temporal listed
        it running (visibility lags a second or so) still has its end told
        (docs/design.md#http-api). Each with its execution as listed (on Temporal: an operator's
        reset starts another). ``born``: the creation the hub follows (else read if asked)."""
        runs = self.runs
        if not isinstance(runs, TemporalRuns):
            return [] if runs is None else [(r, "") for r in await runs.active(session_id)]
        going = await runs.going(session_id, born=born)
        creation = born or creation_when_asked(self.store, session_id)
        ended = await ended_runs(runs.client, session_id, since, creation)
        return [*going.items(), *((r, e) for r, e in ended if r not in going)]

    def forget(self, hub: SessionHub) -> None:
        if self.hubs.get(hub.session_id) is hub:
            del self.hubs[hub.session_id]

    async def aclose(self) -> None:
        for hub in list(self.hubs.values()):
            if hub.task is not None:
                hub.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hub.task

    # -- RunListener ------------------------------------------------------------------------------

    def run_status(
        self,
        session_id: str,
        run_id: str,
        status: Status,
        last_entry: str = "",
        failure: RunFailure | None = None,
    ) -> None:
        key, hub = (session_id, run_id), self.hubs.get(session_id)
        runs = self.going.setdefault(session_id, set())
        if status not in ENDS:
            runs.add(run_id)
            if hub is not None and key not in self.dropped:
                hub.relays.add(run_id)
                hub.status(run_id, status)
            return
        self.shown.pop(key, None)
        runs.discard(run_id)
        if not runs:
            del self.going[session_id]
        if key in self.dropped:
            self.dropped.discard(key)  # its session's streams learnt of the delete
        elif hub is not None:
            hub.end(run_id, status, last_entry, failure)

    def run_delta(
        self,
        session_id: str,
        run_id: str,
        entry_parent: str,
        text: str,
        restart: bool,
        stored: str = "",
    ) -> None:
        piece = Piece(run_id, entry_parent, text, restart)
        if not text and not restart:
            return  # a tool call growing: the streams show text only
        key = (session_id, run_id)
        if key in self.dropped:
            return
        if stored:  # a hub started now replays the reply: no text of it to keep
            self.shown.pop(key, None)
        else:
            self.shown[key] = grown(self.shown.get(key), piece)
        hub = self.hubs.get(session_id)
        if hub is not None:
            hub.piece(piece, wait="told", stored=stored)

    def stored(self, session_id: str, entry_ids: Sequence[str] = (), run_id: str = "") -> None:
        if run_id:  # a receipt of the run: its reply, if one streamed, is stored
            self.shown.pop((session_id, run_id), None)
        hub = self.hubs.get(session_id)
        if hub is not None:
            if run_id:  # a stream that joins now replays it: no text of it after it
                hub.partial.pop(run_id, None)
            hub.told(entry_ids)

    def deleted(self, session_id: str) -> list[str]:
        """The session was deleted: the live text kept for its runs goes (a session created
        again under its ID never shows it, nor anything its runs still do until they end), and
        its streams learn it at once. Returns the runs of it this process relays."""
        for key in [k for k in self.shown if k[0] == session_id]:
            del self.shown[key]
        for key in [k for k in self.ended if k[0] == session_id]:
            del self.ended[key]
        going = sorted(self.going.get(session_id, ()))
        self.dropped.update((session_id, run_id) for run_id in going)
        hub = self.hubs.get(session_id)
        if hub is not None:  # a hub of the session created again shows none of their text
            for run_id in going:
                hub.partial.pop(run_id, None)
        self.stored(session_id)
        return going

    def watched(self, session_id: str) -> bool:
        """A hub follows the session: browsers watch it (or did a moment ago)."""
        return session_id in self.hubs


async def _leaf(store: Store, session_id: str, after: int) -> str:
    """The ID of the entry at seq ``after`` (the leaf a new hub starts from)."""
    if after <= 0:
        return ""
    found = await entries_after(store, session_id, after - 1, 1)
    return found[0][1].id if found else ""
