"""Following the live text of a Temporal run another server process started, for a session
stream.

A run this process started reaches the streams through its own event stream
(:class:`~.relay.RunRelay`). One found running, started through another replica, publishes its
streaming reply to the store's live-delta channel, keyed by its turn (its model calls counted
from 1); a :class:`RunWatch` reads it with a :class:`~durable_agent.durable.follow.DeltaFollower`,
one per run per server process whatever the number of browsers, and counts the run's stored
replies to know the next turn, starting from the turn count and stored entry IDs of the run's
``state()``, asked once (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..activities.run_contracts import RunState
from ..durable.follow import DeltaFollower, SessionFollower
from ..session.deltas import DeltaChannel
from ..session.entries import Entry, MessageEntry
from ..session.store import entries_after
from .runs import RunEnd

__all__ = ["LOOK_BACK", "PACE", "Piece", "RunWatch", "caught_up", "grown", "owner", "replied"]

PACE = 0.25
"""Seconds between two reads of a watched run's channel at most (a FileStore read with nothing
new is one ``stat``): one reader per run per server process, whatever the number of browsers."""

LOOK_BACK = 16
"""Entries before a hub's read position searched for those of a run found running that its
``state()`` did not know yet (:func:`caught_up`)."""


@dataclass
class Piece:
    """One ``delta`` frame: ``text`` to append to the reply that will hang off
    ``entry_parent`` (on ``restart``, what earlier pieces showed is discarded first)."""

    run_id: str
    entry_parent: str
    text: str
    restart: bool

    def data(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "entry_parent": self.entry_parent,
            "text": self.text,
            "restart": self.restart,
        }


def grown(shown: Piece | None, piece: Piece) -> Piece:
    """The text a reply showed so far, after ``piece`` (a new reply or a restart starts over),
    as one piece that shows it whole."""
    if piece.restart or shown is None or shown.entry_parent != piece.entry_parent:
        return Piece(piece.run_id, piece.entry_parent, piece.text, True)
    return Piece(piece.run_id, piece.entry_parent, shown.text + piece.text, True)


@dataclass
class RunWatch:
    """The live text of one Temporal run (module doc)."""

    channel: DeltaChannel
    session_id: str
    run_id: str
    turn: int = 0
    """Model calls of the run whose reply is stored."""
    counted: set[str] = field(default_factory=set)
    """Replies already in :attr:`turn` (from the run's ``state()``)."""
    leaf: str = ""
    """The run's last stored entry (from its ``state()``, then each entry read that hangs off
    it, or the parent its reply's deltas name): the parent of the reply it streams. ``""``: not
    known (its ``state()`` failed)."""
    outcome: asyncio.Task[RunEnd] | None = None
    """How the run ended (``TemporalRuns.outcome``)."""
    deltas: DeltaFollower = field(init=False)
    polled: float = float("-inf")

    def __post_init__(self) -> None:
        self.deltas = self._follower()

    def _follower(self) -> DeltaFollower:
        follower = DeltaFollower(self.channel, self.session_id, self.run_id)
        follower.expect(self.turn + 1)
        return follower

    @property
    def streaming(self) -> bool:
        return self.deltas.shown is not None

    def due_in(self) -> float:
        """Seconds to the next read of the channel: at least every :data:`PACE` seconds while
        the run goes (a reply may start at any moment and stream for less than a second)."""
        since = asyncio.get_running_loop().time() - self.polled
        return min(self.deltas.due_in(), max(0.0, PACE - since))

    async def poll(self, parent: str) -> Piece | None:
        """The reply's next piece; ``parent``: the hub's read leaf, for a run whose leaf and
        reply's parent are not known. The reply's writer names its parent, which beats the
        leaf the run's ``state()`` gave: that may predate the commit the run made since (its
        input, a tool result), which the hub may have read already (docs/design.md#http-api)."""
        self.polled = asyncio.get_running_loop().time()
        update = await self.deltas.poll()
        if update is None:
            return None
        if self.deltas.parent:
            self.leaf = self.deltas.parent  # the run's leaf: its reply hangs off it
        parent = self.leaf or parent
        return Piece(self.run_id, parent, update.delta or "", bool(update.restart))

    def moved(self) -> None:
        """The run stored something (a tool result): its next reply may start soon, so look
        for it at once rather than at the idle pace."""
        if not self.streaming:
            self.deltas = self._follower()

    async def stored(self, entry: Entry, parent: str) -> list[Piece] | None:
        """``entry`` was stored: if it is this run's reply, the last pieces that bring the shown
        text to it (and the watch moves to the next turn); ``None`` if it is not a reply."""
        if not isinstance(entry, MessageEntry) or entry.message.role != "assistant":
            return None
        if entry.synthetic or entry.id in self.counted:
            return None
        pieces = [
            Piece(self.run_id, parent, u.delta or "", bool(u.restart))
            for u in await self.deltas.finish(entry.message)
        ]
        self.turn += 1
        self.deltas = self._follower()
        return pieces


def owner(watches: Iterable[RunWatch], entry: Entry) -> RunWatch | None:
    """The watched run ``entry`` belongs to: the one whose leaf it hangs off (that run's leaf
    moves to it), so runs growing sibling branches at once stay apart; else, for a reply, the
    first run whose leaf is not known; else none."""
    unknown = None
    for watch in watches:
        if watch.leaf and watch.leaf == (entry.parent_id or ""):
            watch.leaf = entry.id
            return watch
        if not watch.leaf and unknown is None:
            unknown = watch
    if isinstance(entry, MessageEntry) and entry.message.role == "assistant":
        return unknown
    return None


def replied(shown: Iterable[Piece], entry: Entry) -> list[str]:
    """The runs whose streaming reply ``entry`` stores: the text each showed so far hangs off
    the entry's parent and begins its text (two runs streaming under one parent, siblings
    with no input, told apart by what they said)."""
    if not isinstance(entry, MessageEntry) or entry.message.role != "assistant":
        return []
    parent, text = entry.parent_id or "", entry.message.text()
    return [p.run_id for p in shown if p.entry_parent == parent and text.startswith(p.text)]


async def caught_up(
    follower: SessionFollower, state: RunState, read: str
) -> tuple[int, set[str], str]:
    """A found run's turn, counted replies and leaf, from its ``state()`` and the entries that
    hang off its leaf up to the hub's read position (``read``: the entry there). The query
    may answer before the run took in a commit of its own (a reply stored, its activity not
    returned), and a hub never reads what lies before where it started: a reply stored there
    that the query did not count would leave the watch on that reply's turn, following text
    long stored while the run's next replies stream unseen (docs/design.md#http-api)."""
    turn, counted, leaf = state.turn_count, set(state.new_entry_ids), state.leaf_id
    if not leaf or leaf == read or follower.after <= 0:
        return turn, counted, leaf
    try:  # best effort: a read failing leaves what the query said
        # up to the hub's read position: the hub reads what follows, the watch places it
        # (:func:`owner`)
        start, end = max(0, follower.after - LOOK_BACK), follower.after
        found = await entries_after(follower.store, follower.session_id, start, end - start)
    except Exception:
        return turn, counted, leaf
    for _, entry in found:
        if (entry.parent_id or "") != leaf:
            continue
        leaf = entry.id
        if (
            isinstance(entry, MessageEntry)
            and entry.message.role == "assistant"
            and not entry.synthetic
            and entry.id not in counted
        ):
            turn += 1
            counted.add(entry.id)
    return turn, counted, leaf
