"""When a session hub reads the store, and what waits for one of its reads (:class:`HubReads`).

A run this process started tells the hub each entry it stored as its own event stream sees it
(:class:`~.relay.RunRelay`: in process the engine's receipts, on Temporal those its run stream
read from the store), and the hub reads at once; while such a told entry is not read yet (a
read failed, or stopped at another writer's append in flight) it reads again within
:data:`CATCH_UP`. With only such runs going it reads on its own once a second
(:data:`IDLE_READ`: another writer's entries, a deletion). A run another process started (a
:class:`~.watch.RunWatch`), or a session with no run going, is read with back-off like a client's
follower: :data:`FASTEST_READ` after a read that found entries, doubling up to a second, at once
when a watched run's last delta says its reply is being stored.

Three things wait for a read (docs/design.md#http-api): a run's end, for a read begun after it
was known that brought the run's last entry (a client that stops at the end has all the run
stored); the first live text of a reply, for the entries its run stored before it called the
model (a message sent into the run): a relayed run's text until the entries it told are read, a
watched run's for one read begun after the text came; and a told entry, for the read that
brings it (given up when a read begun after it was told finds nothing new: it lay before the
hub's start, or the store is down; or after :data:`END_WAIT`: the idle reads go on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..durable.follow import SessionFollower
from ..session.entries import Entry
from ..session.store import Store
from .runs import Status
from .watch import Piece

__all__ = [
    "CATCH_UP",
    "END_WAIT",
    "FASTEST_READ",
    "IDLE_READ",
    "Held",
    "HubReads",
    "Wait",
    "of_reply",
    "of_run",
]

FASTEST_READ = 0.05
"""Seconds to the next read after one that found entries (the back-off's start)."""
IDLE_READ = 1.0
"""Seconds between two reads at most (a FileStore read with nothing new is one ``stat``)."""
CATCH_UP = 0.2
"""Seconds between two reads at most while a told entry or a run's end waits for a read."""
END_WAIT = 15.0
"""Seconds a run's end waits at most for the hub to read the run's last entry: longer than a
MongoStore read waits for an append in flight (``ABANDON_AFTER``). It runs out only if the entry
lies before the hub's first read, or the store fails every read meanwhile."""

Wait = Literal["told", "read", "no"]
"""What a reply's first live text waits for: the entries its run told stored (a relayed run),
one read begun after it came (a watched run), or nothing (it comes with the reply's entry)."""


@dataclass
class Ending:
    """A run's end the hub knows and has not told yet."""

    status: Status
    last_entry: str
    known_at: float
    read_since: bool = False


@dataclass
class Held:
    """The live text of a reply that waits for a read (``told``: for the told entries)."""

    told: bool
    pieces: list[Piece] = field(default_factory=list)
    read_since: bool = False


def of_run(run_id: str) -> Callable[[str, Held], bool]:
    """Picks the held text of the run ``run_id`` (:meth:`HubReads.take_held`)."""
    return lambda held_run, _: held_run == run_id


def of_reply(parent: str) -> Callable[[str, Held], bool]:
    """Picks the held text of the reply that hangs off ``parent`` (its entry is read)."""
    return lambda _, held: held.pieces[0].entry_parent == parent


class HubReads:
    """The reads of one hub's follower: when the next is due, and what waits for one."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        after: int,
        on_wake: Callable[[], None],
        born: datetime | None = None,
    ) -> None:
        self.follower = SessionFollower(
            store,
            session_id,
            after,
            fastest=FASTEST_READ,
            slowest=IDLE_READ,
            on_wake=on_wake,
            born=born,
        )
        self.first_leaf = ""
        """The entry at the seq the hub started after (read before the hub, not by it)."""
        self.ending: dict[str, Ending] = {}
        """Run ID -> its end, held until a read brought the run's last entry."""
        self.unread: dict[str, tuple[int, float]] = {}
        """Entries a run told stored that no read brought yet -> the number of reads begun
        before it was told, and when it was."""
        self._reads = 0
        self.held: dict[str, Held] = {}
        """Run ID -> its reply's first live text, waiting for a read."""
        self.answered: dict[str, str] = {}
        """Run ID -> the parent of its streaming reply whose entry a read brought."""

    def told(self, entry_ids: Iterable[str]) -> None:
        clock = asyncio.get_running_loop().time()
        for entry_id in entry_ids:
            if not self.follower.has_read(entry_id):
                self.unread.setdefault(entry_id, (self._reads, clock))
        self.follower.wake()

    def end(self, run_id: str, status: Status, last_entry: str) -> None:
        clock = asyncio.get_running_loop().time()
        self.ending[run_id] = Ending(status, last_entry, clock)
        self.follower.wake()

    def hold(self, piece: Piece, first: bool, wait: Wait) -> bool:
        """Whether ``piece`` waits (held): behind held text of its run, or as a reply's first
        text (``first``) with something to wait for."""
        held = self.held.get(piece.run_id)
        if held is not None:
            held.pieces.append(piece)
            return True
        if first and (wait == "read" or (wait == "told" and self.unread)):
            self.held[piece.run_id] = Held(wait == "told", [piece])
            self.follower.wake()
            return True
        return False

    def stale(self, piece: Piece, stored: str) -> bool:
        """Whether ``piece`` is text of a reply whose entry the hub sent already (a read
        brought it, or it lies where the hub started: ``stored``, the reply's entry as its run
        knows it): the run's stream may give a reply's last text after the hub read its entry
        (on Temporal the two read the store apart), and a delta after the entry that stores
        its reply would leave a client showing text the reply holds (docs/design.md#http-api)."""
        if self.answered.get(piece.run_id) == piece.entry_parent:
            return True
        return bool(stored) and (self.follower.has_read(stored) or stored == self.first_leaf)

    def take_held(self, which: Callable[[str, Held], bool], whole: bool = False) -> list[Piece]:
        """The held text of the runs ``which`` picks, no longer held: one reply's, unless
        ``whole`` (the run ended). Text of the run's next reply, held behind it, waits on as
        that reply's first text: the entry it hangs off may be unread yet."""
        out: list[Piece] = []
        for run_id, held in list(self.held.items()):
            if which(run_id, held):
                del self.held[run_id]
                parent = held.pieces[0].entry_parent
                ours = next(
                    (i for i, p in enumerate(held.pieces) if p.entry_parent != parent),
                    len(held.pieces),
                )
                out += held.pieces if whole else held.pieces[:ours]
                if not whole and ours < len(held.pieces):
                    self.held[run_id] = Held(held.told, held.pieces[ours:])
                    self.follower.wake()
        return out

    async def read(self) -> list[tuple[int, Entry]]:
        """One read of the follower; what waited for a read, begun now, may go after it."""
        for ending in self.ending.values():
            ending.read_since = True  # known before this read begins
        for held in self.held.values():
            held.read_since = True
        self._reads += 1
        number = self._reads
        found = await self.follower.read()
        # a told entry that a read begun since did not bring, when it found nothing new, lies
        # before the hub's start (or the store is down); one that waited longer than an end
        # would, the same: the idle reads take it from there
        clock = asyncio.get_running_loop().time()
        self.unread = {
            i: (n, at)
            for i, (n, at) in self.unread.items()
            if not self.follower.has_read(i) and (found or n >= number) and clock - at < END_WAIT
        }
        return found

    def released(self, _: str, held: Held) -> bool:
        """The held text's read came: one begun after it, which brought every told entry."""
        return held.read_since and not (held.told and self.unread)

    def ended(self) -> list[tuple[str, Status]]:
        """The ends whose run's last entry a read brought (or that waited too long)."""
        clock = asyncio.get_running_loop().time()
        out: list[tuple[str, Status]] = []
        for run_id, ending in list(self.ending.items()):
            last = ending.last_entry
            read = not last or last == self.first_leaf or self.follower.has_read(last)
            if ending.read_since and (read or clock - ending.known_at > END_WAIT):
                del self.ending[run_id]
                out.append((run_id, ending.status))
        return out

    @property
    def waiting(self) -> bool:
        """Something waits for a read."""
        return bool(self.unread or self.ending or self.held)

    def pace(self, active: Collection[str], relays: Collection[str]) -> None:
        """Set when the next read is due (module doc), after a read."""
        fast = bool(self.unread or self.ending)
        self.follower.slowest = CATCH_UP if fast else IDLE_READ
        if active and not fast and all(r in relays for r in active):
            self.follower.defer(IDLE_READ)  # its runs tell what they store
