"""One follower per session per server process, shared by every stream of that session.

A :class:`SessionHub` follows its session in the store with a
:class:`~durable_agent.durable.follow.SessionFollower` (a read with back-off, at once when woken
by a run's activity) and fans what it reads out to its subscribers, each a queue of frames:
stored entries (receipts) in seq order, the live text of streaming replies, run status, and the
session's deletion. Two hundred browsers on one session cost one follower. A hub outlives its
last subscriber by :data:`LINGER` seconds, so a reload mid-reply finds the reply's text so far.
:class:`Hubs` is the process's registry and hears the runs this process started
(:class:`~.runs.RunListener`, told by each run's :class:`~.relay.RunRelay`); a Temporal run another
process started is followed by a :class:`~.watch.RunWatch` (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from ..durable.follow import SessionFollower, entries_after
from ..session.approvals import ApprovalRequest
from ..session.codec import entry_to_wire
from ..session.deltas import LiveStore
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionNotFoundError
from ..session.store import Store
from .runs import REMEMBERED, Runs, Status
from .temporal_runs import TemporalRuns
from .watch import Piece, RunWatch, owner

__all__ = ["LINGER", "Frame", "Hubs", "SessionHub", "entry_frame"]

logger = logging.getLogger("durable_agent.server")

LINGER = 10.0
"""Seconds a hub keeps following after its last subscriber left."""
LOOK_FOR = 5.0
"""Seconds a hub looks for the run behind entries it cannot place (visibility lags ~1 s)."""
BUSY_READ = 0.05
"""Seconds between two reads of a session at most while one of its runs goes (a FileStore read
with nothing new is one ``stat``): a tool result, which no live delta announces, reaches the
streams within this; an idle session is read once a second."""
IDLE_READ = 1.0
STATE_TIMEOUT = 2.0
"""Seconds the one ``state()`` query of a run found running may take."""
END_WAIT = 15.0
"""Seconds a run's end waits at most for the hub to read the run's last entry: longer than a
MongoStore read waits for an append in flight (``ABANDON_AFTER``). It runs out only if the entry
lies before the hub's first read, or the store fails every read meanwhile."""


@dataclass(frozen=True)
class Frame:
    """One server-sent event: ``event``, ``data`` (JSON), ``id`` (entries only: the seq)."""

    event: str
    data: dict[str, Any]
    id: int | None = None


def entry_frame(seq: int, entry: Entry) -> Frame:
    return Frame("entry", {"seq": seq, "entry": entry_to_wire(entry)}, seq)


def _status(run_id: str, status: str) -> Frame:
    return Frame("run", {"run_id": run_id, "status": status})


@dataclass
class Ending:
    """A run's end the hub knows and has not told yet (:meth:`SessionHub.end`)."""

    status: Status
    last_entry: str
    known_at: float
    read_since: bool = False


class SessionHub:
    """The shared follower of one session (module doc)."""

    def __init__(self, hubs: Hubs, session_id: str, after: int) -> None:
        self.hubs = hubs
        self.session_id = session_id
        self.follower = SessionFollower(hubs.store, session_id, after, slowest=IDLE_READ)
        self.subscribers: set[asyncio.Queue[Frame | None]] = set()
        self.active: dict[str, str] = {}
        """Run ID -> status of the runs going on."""
        self.partial: dict[str, Piece] = {}
        """Run ID -> the text its streaming reply showed so far (for late joiners)."""
        self.watches: dict[str, RunWatch] = {}
        self.asked: dict[str, set[str]] = {}
        """Run ID -> the calls a watched run waits for a decision on (:meth:`_waits`)."""
        self.leaf = ""
        """The last stored entry read (a watched run's reply parent while its leaf is unknown)."""
        self.first_leaf = ""
        """The entry at the seq the hub started after (read before the hub, not by it)."""
        self._kick = asyncio.Event()
        self.ending: dict[str, Ending] = {}
        """Run ID -> its end, held until the hub read the run's last entry."""
        self._look_until = 0.0
        self._looked = 0.0
        self._idle_since: float | None = None
        self.task: asyncio.Task[None] | None = None

    # -- subscribers ----------------------------------------------------------------------------

    def join(self) -> tuple[asyncio.Queue[Frame | None], list[Frame], list[Piece]]:
        """A new subscriber's queue, the status of the active runs and the replies' text so far
        (taken together, so nothing falls between them and the queue)."""
        queue: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.subscribers.add(queue)
        self._idle_since = None
        runs = [_status(r, s) for r, s in self.active.items()]
        return queue, runs, list(self.partial.values())

    def leave(self, queue: asyncio.Queue[Frame | None]) -> None:
        self.subscribers.discard(queue)
        if not self.subscribers:
            self._idle_since = asyncio.get_running_loop().time()
            self.kick()

    def _send(self, frame: Frame | None) -> None:
        for queue in self.subscribers:
            queue.put_nowait(frame)

    def kick(self, read: bool = False) -> None:
        if read:
            self.follower.wake()
        self._kick.set()

    # -- what runs tell ---------------------------------------------------------------------------

    def end(self, run_id: str, status: Status, last_entry: str) -> None:
        """The run ended, its last stored entry being ``last_entry``: told once a read that
        began after now (one in flight may predate the run's last append) brought that entry,
        so a client that stops at the end has all the run stored (docs/design.md#http-api)."""
        self.ending[run_id] = Ending(status, last_entry, asyncio.get_running_loop().time())
        self.kick(read=True)

    def _release(self) -> None:
        """Tell the ends whose run's last entry the hub has read (or waited for too long)."""
        clock = asyncio.get_running_loop().time()
        for run_id, ending in list(self.ending.items()):
            last = ending.last_entry
            read = not last or last == self.first_leaf or self.follower.has_read(last)
            if ending.read_since and (read or clock - ending.known_at > END_WAIT):
                del self.ending[run_id]
                self.status(run_id, ending.status)

    def status(self, run_id: str, status: Status) -> None:
        """A run's status changed (an end: told by :meth:`_release`)."""
        if status in ("started", "awaiting_approval"):
            if self.active.get(run_id) == status:
                return
            self.active[run_id] = status
        else:
            if run_id not in self.active and status == self.hubs.ended.get(run_id):
                return
            self.active.pop(run_id, None)
            self.asked.pop(run_id, None)
            self.partial.pop(run_id, None)
            self.watches.pop(run_id, None)
            self.hubs.ended[run_id] = status
            while len(self.hubs.ended) > REMEMBERED:
                del self.hubs.ended[next(iter(self.hubs.ended))]
        self._send(_status(run_id, status))
        self.kick(read=True)

    def piece(self, piece: Piece) -> None:
        if not piece.text and not piece.restart:
            return  # a tool call growing: the stream shows text only
        shown = self.partial.get(piece.run_id)
        if piece.restart or shown is None or shown.entry_parent != piece.entry_parent:
            self.partial[piece.run_id] = Piece(piece.run_id, piece.entry_parent, piece.text, True)
        else:
            shown.text += piece.text
        self._send(Frame("delta", piece.data()))

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

    def _ended(self, run_id: str, task: asyncio.Task[tuple[Status, str]]) -> None:
        if task.cancelled():
            return
        ended: tuple[Status, str] = task.result() if task.exception() is None else ("failed", "")
        if ended[0] != "started":  # "started": the long poll broke, not the run
            self.end(run_id, *ended)

    async def look(self) -> None:
        """Find the session's runs (another replica's too) and follow those not known yet."""
        runs = self.hubs.runs
        if runs is None:
            return
        try:
            found = await runs.active(self.session_id)
        except Exception as exc:
            logger.warning("listing the runs of %s: %s", self.session_id, type(exc).__name__)
            return
        for run_id in found:
            if run_id in self.active or run_id in self.hubs.ended:
                continue  # known, or ended (its client stream may still be reading)
            relayed = runs.relayed(self.session_id, run_id)
            if isinstance(runs, TemporalRuns):
                await self._found(runs, run_id, watch=relayed is None)
            elif relayed is not None:
                self.status(run_id, relayed)  # in memory; the run tells the rest

    async def _found(self, runs: TemporalRuns, run_id: str, *, watch: bool) -> None:
        """Follow a Temporal run found running: ``watch`` one another process started.

        The one ``state()`` query of such a run (docs/design.md#http-api), asked once per hub,
        not per browser: its pending approvals give the status the first frame of every stream
        shows (the hub starts reading where its first client resumed, past the run's requests,
        and the events of a run this process started reach it a read of the store later), and
        its turn count keys the live deltas of a watched run's reply. A watched run's later
        waits are told from the entries the hub reads (:meth:`_waits`)."""
        status: Status = "started"
        state: tuple[int, set[str], str] | None = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STATE_TIMEOUT):
                st = await runs.state(self.session_id, run_id)
            state = (st.turn_count, set(st.new_entry_ids), st.leaf_id)
            if st.pending_approvals:
                status = "awaiting_approval"
                self.asked[run_id] = {p.tool_call_id for p in st.pending_approvals}
        if run_id in self.active or run_id in self.hubs.ended:
            return  # told meanwhile
        if watch:
            self._watch(run_id, state)
        self.status(run_id, status)

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._loop()
        except SessionNotFoundError:
            self._send(Frame("deleted", {"session_id": self.session_id}))
        except Exception:
            logger.exception("following session %s", self.session_id)
        finally:
            self.hubs.forget(self)
            self._send(None)

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
                for ending in self.ending.values():
                    ending.read_since = True  # known before this read begins
                await self._read()
                self._release()
            if self._look_until > clock() and clock() - self._looked >= 1.0:
                self._looked = clock()
                await self.look()
            await self._sleep()

    async def _sleep(self) -> None:
        self.follower.slowest = BUSY_READ if self.active or self.ending else IDLE_READ
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
        found = await self.follower.read()
        if not found:
            return
        unplaced = False  # a question no run is known to have asked: a run's input
        for seq, entry in found:
            watch = owner(self.watches.values(), entry)
            pieces = None if watch is None else await watch.stored(entry, entry.parent_id or "")
            if watch is not None and pieces is not None:
                for piece in pieces:
                    self.piece(piece)
                self.partial.pop(watch.run_id, None)
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


class Hubs:
    """The hubs of this process, by session; hears the runs of this process."""

    def __init__(self, store: Store, runs: Runs | None) -> None:
        self.store = store
        self.runs = runs
        self.channel = store.live_deltas() if isinstance(store, LiveStore) else None
        self.hubs: dict[str, SessionHub] = {}
        self.ended: dict[str, str] = {}
        """Run ID -> how it ended, for runs seen ending (not announced twice)."""

    async def hub(self, session_id: str, after: int) -> SessionHub:
        """The session's hub, started following after seq ``after`` if it is new."""
        hub = self.hubs.get(session_id)
        if hub is None:
            hub = SessionHub(self, session_id, after)
            self.hubs[session_id] = hub
            hub.leaf = hub.first_leaf = await _leaf(self.store, session_id, after)
            await hub.look()
            hub.task = asyncio.create_task(hub.run())
        return hub

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
        self, session_id: str, run_id: str, status: Status, last_entry: str = ""
    ) -> None:
        hub = self.hubs.get(session_id)
        if hub is None:
            return
        if status in ("completed", "failed", "cancelled"):
            hub.end(run_id, status, last_entry)
        else:
            hub.status(run_id, status)

    def run_delta(
        self, session_id: str, run_id: str, entry_parent: str, text: str, restart: bool
    ) -> None:
        hub = self.hubs.get(session_id)
        if hub is not None:
            hub.piece(Piece(run_id, entry_parent, text, restart))

    def stored(self, session_id: str) -> None:
        hub = self.hubs.get(session_id)
        if hub is not None:
            hub.kick(read=True)


async def _leaf(store: Store, session_id: str, after: int) -> str:
    """The ID of the entry at seq ``after`` (the leaf a new hub starts from)."""
    if after <= 0:
        return ""
    found = await entries_after(store, session_id, after - 1)
    return found[0][1].id if found else ""
