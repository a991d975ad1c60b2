"""One follower per session per server process, shared by every stream of that session.

A :class:`SessionHub` follows its session in the store with a
:class:`~durable_agent.durable.follow.SessionFollower` and fans what it reads out to its
subscribers, each a queue of frames: stored entries (receipts) in seq order, the live text of
streaming replies, run status, and the session's deletion. Two hundred browsers on one session
cost one follower. A hub outlives its last subscriber by :data:`LINGER` seconds (reading
nothing meanwhile unless a run goes), so a reload mid-reply finds the reply's text so far.
:class:`~.hubs.Hubs` is the process's registry.

When it reads, and what waits for one of its reads (a run's end, a reply's first live text),
:mod:`.reads` says. A tool result reaches the streams one store read after the run that stored
it: in process at once (the engine's receipt wakes the hub); on Temporal when the run's own
stream reads it (its back-off: 0.1 s after the run's previous entry, doubling up to 0.25 s
while the run's tools run); for a run another process started within the hub's back-off (50 ms,
doubling up to 1 s) (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..session.approvals import ApprovalRequest
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionNotFoundError, StoreUnavailableError
from ..workflows.worker_logs import in_one_line
from .frames import Frame, entry_frame, gone, status_frame
from .reads import Held, HubReads, Wait, of_reply, of_run
from .runs import REMEMBERED, RunEnd, RunFailure, Status
from .temporal_runs import TemporalRuns
from .watch import Piece, RunWatch, caught_up, grown, owner, replied

if TYPE_CHECKING:  # the registry starts hubs
    from .hubs import Hubs

__all__ = ["LINGER", "Frame", "SessionHub", "entry_frame"]

logger = logging.getLogger("durable_agent.server")

LINGER = 10.0
"""Seconds a hub keeps following after its last subscriber left."""
LOOK_FOR = 5.0
"""Seconds a hub looks for the run behind entries it cannot place (visibility lags ~1 s)."""
STATE_TIMEOUT = 2.0
"""Seconds the one ``state()`` query of a run found running may take."""
BACKLOG = 2000
"""Frames held at most for a subscriber that does not take them (its client reads slower than
they come): past that its stream ends, and the client resumes from the store."""


class SessionHub:
    """The shared follower of one session (module doc)."""

    def __init__(
        self, hubs: Hubs, session_id: str, after: int, born: datetime | None = None
    ) -> None:
        self.hubs = hubs
        self.session_id = session_id
        self._kick = asyncio.Event()
        self.reads = HubReads(hubs.store, session_id, after, self._kick.set, born)
        self.follower = self.reads.follower
        self.subscribers: set[asyncio.Queue[Frame]] = set()
        self.active: dict[str, str] = {}
        """Run ID -> status of the runs going on."""
        self.failures: dict[str, RunFailure] = {}
        """Why a failed run failed, until its end is sent."""
        self.partial: dict[str, Piece] = {}
        """Run ID -> the text its streaming reply showed so far (for late joiners)."""
        self.watches: dict[str, RunWatch] = {}
        self.asked: dict[str, set[str]] = {}
        """Run ID -> the calls a watched run waits for a decision on (:meth:`_waits`)."""
        self.leaf = ""
        """The last stored entry read (a watched run's reply parent while its leaf is unknown)."""
        self.relays: set[str] = set()
        """The runs going that this process relays (they tell what they store)."""
        self._look_until = 0.0
        self._looked = 0.0
        self._idle_since: float | None = None
        self.since = datetime.now(UTC)  # runs that ended since: another replica's too (look)
        self.task: asyncio.Task[None] | None = None

    # -- subscribers ----------------------------------------------------------------------------

    def join(self) -> tuple[asyncio.Queue[Frame], list[Frame], list[Piece]]:
        """A new subscriber's queue, the status of the active runs and the replies' text so far
        (taken together, so nothing falls between them and the queue)."""
        queue: asyncio.Queue[Frame] = asyncio.Queue()
        self.subscribers.add(queue)
        if self._idle_since is not None:  # it lingered without reading: read now
            self._idle_since = None
            self.kick(read=True)
        runs = [status_frame(r, s) for r, s in self.active.items()]
        return queue, runs, list(self.partial.values())

    def leave(self, queue: asyncio.Queue[Frame]) -> None:
        self.subscribers.discard(queue)
        if not self.subscribers:
            self._idle_since = asyncio.get_running_loop().time()
            self.kick()

    def _send(self, frame: Frame) -> None:
        for queue in list(self.subscribers):
            if frame.event != "gone" and queue.qsize() >= BACKLOG:
                self._let_go(queue)
            else:
                queue.put_nowait(frame)

    def _let_go(self, queue: asyncio.Queue[Frame]) -> None:
        """The store, not this process's memory, buffers for a client that fell behind: its
        stream ends, and it comes back with ``Last-Event-ID`` (docs/design.md#http-api)."""
        self.subscribers.discard(queue)
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(gone("TooSlow"))

    def kick(self, read: bool = False) -> None:
        if read:
            self.follower.wake()
        self._kick.set()

    # -- what runs tell ---------------------------------------------------------------------------

    def told(self, entry_ids: Iterable[str]) -> None:
        """A run this process relays stored these entries (its event stream saw them): read."""
        self.reads.told(entry_ids)
        self._kick.set()

    def end(
        self, run_id: str, status: Status, last_entry: str, failure: RunFailure | None = None
    ) -> None:
        """The run ended, its last stored entry being ``last_entry``: told once a read that
        began after now (one in flight may predate the run's last append) brought that entry,
        so a client that stops at the end has all the run stored (docs/design.md#http-api);
        a failed run's end says why (``failure``)."""
        if failure is not None:
            self.failures[run_id] = failure
        self.reads.end(run_id, status, last_entry)
        self._kick.set()

    def status(self, run_id: str, status: Status) -> None:
        """A run's status changed (an end: once its read came, :meth:`_read`). A run this
        process relays tells what it stores; one found running is read for at once."""
        relayed = run_id in self.relays
        if status in ("started", "awaiting_approval"):
            if self.active.get(run_id) == status:
                return
            self.active[run_id] = status
        else:
            key = (self.session_id, run_id)
            if run_id not in self.active and status == self.hubs.ended.get(key):
                self.failures.pop(run_id, None)
                return
            self._show_held(of_run(run_id), whole=True)  # before its end
            self.relays.discard(run_id)
            for kept in (self.active, self.asked, self.partial, self.watches, self.reads.answered):
                kept.pop(run_id, None)
            self.hubs.ended[key] = status
            while len(self.hubs.ended) > REMEMBERED:
                del self.hubs.ended[next(iter(self.hubs.ended))]
        self._send(status_frame(run_id, status, self.failures.pop(run_id, None)))
        self.kick(read=not relayed)

    def piece(self, piece: Piece, wait: Wait = "read", stored: str = "") -> None:
        """Live text of a run's reply: its first waits for a read, a sent reply's is dropped."""
        if not piece.text and not piece.restart:
            return  # a tool call growing: the stream shows text only
        if self.reads.stale(piece, stored):
            self.partial.pop(piece.run_id, None)
            return
        shown = self.partial.get(piece.run_id)
        first = shown is None or shown.entry_parent != piece.entry_parent
        if self.reads.hold(piece, first, wait):
            self._kick.set()
        else:
            self._show(piece)

    def _show(self, piece: Piece) -> None:
        shown = self.partial.get(piece.run_id)
        if shown is None:  # its reply from the start: a client back from another server drops
            piece = replace(piece, restart=True)  # what it showed (docs/design.md#http-api)
        self.partial[piece.run_id] = grown(shown, piece)
        self._send(Frame("delta", piece.data()))

    def _show_held(self, which: Callable[[str, Held], bool], whole: bool = False) -> None:
        for piece in self.reads.take_held(which, whole):
            self._show(piece)

    # -- Temporal runs ---------------------------------------------------------------------------

    def _watch(self, run_id: str, state: tuple[int, set[str], str] | None) -> None:
        runs = self.hubs.runs
        channel = self.hubs.channel
        if run_id in self.watches or channel is None or not isinstance(runs, TemporalRuns):
            return
        turn, counted, leaf = state or (0, set(), "")
        watch = RunWatch(channel, self.session_id, run_id, turn, counted, leaf)
        watch.outcome = asyncio.create_task(runs.outcome(self.session_id, run_id))
        watch.outcome.add_done_callback(lambda t: self._ended(run_id, t))
        self.watches[run_id] = watch

    def _ended(self, run_id: str, task: asyncio.Task[RunEnd]) -> None:
        """The watched run's end as Temporal told it (an outage is waited out, never an end);
        a run whose workflow is gone (its session's deleted) is told failed, with no reason."""
        if task.cancelled():
            return
        self.end(run_id, *(task.result() if task.exception() is None else ("failed", "", None)))

    async def look(self) -> None:
        """Find the session's runs (another replica's too) and follow those not known yet."""
        runs = self.hubs.runs
        if runs is None:
            return
        try:  # the creation the hub follows: no record read for each run the look finds
            found = await self.hubs.found(self.session_id, self.follower.born, self.since)
        except Exception as exc:  # an outage: one line, as the server logs a 503
            logger.warning("listing the runs of %s: %s", self.session_id, in_one_line(exc))
            return
        for run_id, execution in found:
            key = (self.session_id, run_id)
            if (
                key in self.hubs.ended
                and isinstance(runs, TemporalRuns)
                and await runs.ends.reset(self.session_id, run_id, execution)
            ):
                self.hubs.ended.pop(key, None)  # an operator reset it: told as a run found
            if run_id in self.active or key in self.hubs.ended:
                continue  # known, or ended (its client stream may still be reading)
            if key in self.hubs.dropped:
                continue  # a run of the session deleted before this one was created
            relayed = runs.relayed(self.session_id, run_id)
            if relayed is not None:
                self.relays.add(run_id)
            if isinstance(runs, TemporalRuns):
                await self._found(runs, run_id, watch=relayed is None)
            elif relayed is not None:
                self.status(run_id, relayed)  # in memory; the run tells the rest

    async def _found(self, runs: TemporalRuns, run_id: str, *, watch: bool) -> None:
        """Follow a Temporal run found running: ``watch`` one another process started.

        The one ``state()`` query of such a run (docs/design.md#http-api), once per hub, not per
        browser: its pending approvals give the status every stream's first frame shows (the hub
        starts reading where its first client resumed, past the run's requests; a run this process
        started tells its events a store read later), its turn count keys a watched run's live
        deltas. A watched run's later waits come from the entries the hub reads (:meth:`_waits`)."""
        status: Status = "started"
        state: tuple[int, set[str], str] | None = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STATE_TIMEOUT):
                st = await runs.state(self.session_id, run_id)
            state = await caught_up(self.follower, st, self.leaf) if watch else None
            if st.pending_approvals:
                status = "awaiting_approval"
                self.asked[run_id] = {p.tool_call_id for p in st.pending_approvals}
        if run_id in self.active or (self.session_id, run_id) in self.hubs.ended:
            return  # told meanwhile
        if watch:
            self._watch(run_id, state)
        self.status(run_id, status)

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        why = "ServerStopping"  # unless it ends otherwise: cancelled by Hubs.aclose
        try:
            await self._loop()
            why = "idle"  # it lingered with no subscriber
        except SessionNotFoundError:
            why = "deleted"
            self.hubs.deleted(self.session_id)  # deleted elsewhere: its live text goes too
            self._send(Frame("deleted", {"session_id": self.session_id}))
        except StoreUnavailableError as exc:  # its streams end; their clients come back
            why = "StoreUnavailableError"
            logger.warning("following session %s: %s", self.session_id, " ".join(str(exc).split()))
        except Exception:
            why = "StreamFailed"
            logger.exception("following session %s", self.session_id)
        finally:
            self.close(why)

    def created_again(self) -> None:
        """The session was deleted and created again under its ID since this hub last read it:
        its streams learn of the delete (the process's runs of the new session are left alone),
        and it stops, for a new hub to follow the new session."""
        self._send(Frame("deleted", {"session_id": self.session_id}))
        if self.task is not None:
            self.task.cancel()
        self.close("deleted")

    def close(self, why: str) -> None:
        """The hub stops: its subscribers' streams end (their clients come back to a new one),
        told ``why`` (:func:`gone`), and it waits for nothing more."""
        self.follower.close()
        for watch in self.watches.values():  # a run may wait days for people: the next hub
            if watch.outcome is not None:  # polls its end anew
                watch.outcome.cancel()
        self.hubs.forget(self)
        self._send(gone(why))

    async def _loop(self) -> None:
        clock = asyncio.get_running_loop().time
        while True:
            if self._idle_since is not None and clock() - self._idle_since > LINGER:
                return
            for watch in list(self.watches.values()):
                if watch.due_in() <= 0.01:
                    piece = await watch.poll(self.leaf)
                    if piece is not None:
                        self.piece(piece)
                        if watch.deltas.final:
                            self.follower.wake()
            if self.follower.woken or self.follower.due_in() <= 0.01:
                await self._read()
            if self._look_until > clock() and clock() - self._looked >= 1.0:
                self._looked = clock()
                await self.look()
            await self._sleep()

    async def _sleep(self) -> None:
        waits = [self.follower.due_in(), *(w.due_in() for w in self.watches.values())]
        if self._look_until > asyncio.get_running_loop().time():
            waits.append(1.0)
        if self._idle_since is not None:
            waits.append(LINGER)
        self._kick.clear()
        if self.follower.woken:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._kick.wait(), max(0.0, min(waits)))

    async def _read(self) -> None:
        """One read; then what waited for it goes out, and the next one is set (:mod:`.reads`)."""
        found = await self.reads.read()
        await self._fan_out(found)
        self._show_held(self.reads.released)
        for run_id, status in self.reads.ended():
            self.status(run_id, status)
        self.reads.pace(self.active.keys(), self.relays)
        if not self.subscribers and not self.active and not self.reads.waiting:
            self.follower.defer(LINGER)  # it lingers for a reload mid-reply: none is going

    async def _fan_out(self, found: list[tuple[int, Entry]]) -> None:
        if not found:
            return
        unplaced = False  # a question no run is known to have asked: a run's input
        for seq, entry in found:
            if isinstance(entry, MessageEntry) and entry.message.role == "assistant":
                parent = entry.parent_id or ""  # the reply's held live text goes first
                self._show_held(of_reply(parent))
            watch = owner(self.watches.values(), entry)
            pieces = None if watch is None else await watch.stored(entry, entry.parent_id or "")
            if watch is not None and pieces is not None:
                self._show_held(of_run(watch.run_id))
                for piece in pieces:
                    self.piece(piece, wait="no")
                self.partial.pop(watch.run_id, None)
            for run_id in replied(self.partial.values(), entry) if watch is None else ():
                self.reads.answered[run_id] = self.partial.pop(run_id).entry_parent
            unplaced |= watch is None and isinstance(entry, MessageEntry)
            self.leaf = entry.id
            self._send(entry_frame(seq, entry))
            self._waits(entry)
        for watch in self.watches.values():
            watch.moved()
        runs = self.hubs.runs
        if (unplaced or not self.active) and runs is not None and not runs.local:
            # entries no known run placed: a run another replica started (visibility lags)
            self._look_until = asyncio.get_running_loop().time() + LOOK_FOR

    def _waits(self, entry: Entry) -> None:
        """The wait for people of a run another process started, told from its stored entries
        in their order (its ``events`` are never polled): its requests start the wait, the
        results of the calls it asked about end it (another run's entries do not). A run this
        process started tells its waits itself (:class:`~.relay.RunRelay`)."""
        if isinstance(entry, ApprovalRequest) and entry.run_id in self.watches:
            self.asked.setdefault(entry.run_id, set()).add(entry.tool_call_id)
            self.status(entry.run_id, "awaiting_approval")
        elif isinstance(entry, MessageEntry) and entry.message.role == "tool_result":
            call = entry.message.tool_call_id
            for run_id, calls in list(self.asked.items()):
                if call not in calls:
                    continue
                calls.discard(call)
                if not calls:
                    del self.asked[run_id]
                    if self.active.get(run_id) == "awaiting_approval":
                        self.status(run_id, "started")
