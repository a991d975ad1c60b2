"""A handle's session state: the seam between the handle and the executors that run it.

The state holds what docs/design.md#handle-and-engine describes (log, index, leaf, the busy and
closed flags, the lock) and the one persist algorithm. Executors receive it (and the handle's
:class:`AgentConfig`) instead of the handle, so neither side reaches into the other's private
members.

Every write goes through :meth:`SessionState.commit`: a write that reached the store is applied
even if the caller is cancelled meanwhile (the cancellation is raised afterwards), so the handle's
log always equals what the store holds for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..agent.options import AgentOptions
from ..ai.messages import Message
from ..ai.timefmt import utc_now
from ..session.appendplan import Guard
from ..session.approvals import PendingItem, pending_items
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.errors import EntryConflictError, EntryTooLargeError, SessionNotFoundError
from ..session.ids import new_id
from ..session.repair import repair_tool_calls
from ..session.store import GuardedStore, Store, open_session
from ..session.tree import path as tree_path
from ..session.views import raw_model_view
from .errors import AgentClosedError, RunActiveError
from .persist import Stamped, see_through, stamp
from .publisher import PublisherLike

if TYPE_CHECKING:
    from .engine import RunEngine

__all__ = ["NOTHING_WRITTEN", "AgentConfig", "LeafMovedOn", "SessionState"]

NOTHING_WRITTEN = (EntryConflictError, EntryTooLargeError, SessionNotFoundError, ValueError)
"""Append failures that guarantee nothing of the batch was stored (docs/design.md#store-contract);
any other failure may have landed."""


class LeafMovedOn(Exception):
    """A guarded write (:meth:`SessionState.persist`, :meth:`SessionState.commit`) found an
    entry another process stored since this handle read the session; nothing of it was
    written."""


@dataclass(frozen=True)
class AgentConfig:
    """What a handle was opened with, as executors need it."""

    factory: Any
    """A loop factory in process, an agent name on Temporal, or ``None`` (record only)."""
    options: AgentOptions
    raw_options: dict[str, Any] = field(default_factory=dict)
    """The options as given (plain JSON for Temporal)."""
    publisher: PublisherLike | None = None


class SessionState:
    """The live state of one handle on one session (docs/design.md#handle-and-engine)."""

    def __init__(
        self, session_id: str, store: Store, entries: Sequence[Entry], *, created: bool = True
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.created = created
        """Whether the store holds the session. A Temporal handle on an unknown session leaves
        creating it to its first run, which checks the agent first (so a run that cannot start
        creates nothing), or to its first write (:meth:`commit`, :meth:`persist`)."""
        self.log: list[Entry] = list(entries)
        """All loaded or recorded entries in append order, ephemeral included."""
        self.index: dict[str, Entry] = {e.id: e for e in entries}
        """Stored entries by ID."""
        self.leaf = entries[-1].id if entries else ""
        self.lock = asyncio.Lock()
        self._idle = asyncio.Event()
        self._idle.set()
        self.compacting = False
        self.closed = False
        self.born: datetime | None = None
        """The session record's ``created_at`` as this handle's last run start read it (a
        Temporal run's memo names it: docs/design.md#retention); ``None`` before one."""
        self.live_run_id = ""
        """The ID of this handle's live run on another executor (Temporal), ``""`` if none."""
        self.live_run: RunEngine | None = None
        """The engine of this handle's in-process run while it runs (decisions and messages
        go to its inbox)."""
        self._active: _ActivePath | None = None
        self._writing: list[Entry] = []
        """The batch being stored: it may be in the store before it is applied here."""
        self.unsettled: list[str] = []
        """IDs of a failed write that may have landed (the store raised after, or instead of,
        applying it): the next run start reconciles them (see :mod:`.reconcile`)."""

    # -- guards ------------------------------------------------------------------------------

    def check_open(self) -> None:
        """Raise if closed (what a fork or a decision, which a run leaves possible, checks)."""
        if self.closed:
            raise AgentClosedError(f"agent for session {self.session_id!r} is closed")

    def check_mutable(self) -> None:
        """Raise if closed, or busy with a run or compaction."""
        self.check_open()
        if self.running or self.compacting:
            raise RunActiveError(f"a run or compaction is active on session {self.session_id!r}")

    @property
    def running(self) -> bool:
        """A run of this handle is live (the busy rule)."""
        return not self._idle.is_set()

    @running.setter
    def running(self, value: bool) -> None:
        if value:
            self._idle.clear()
        else:
            self._idle.set()

    def run_finished(self) -> None:
        self.running = False

    async def run_ended(self) -> None:
        """Return once no run of this handle is live."""
        await self._idle.wait()

    # -- reads -------------------------------------------------------------------------------

    def path(self) -> list[Entry]:
        """The active path (a new list)."""
        return list(self._active_path().path)

    def pending(self) -> list[PendingItem]:
        """The pending calls of the active path, with those a batch being stored asks about:
        the store (and every reader of it) holds its requests before the write returns and
        the batch is applied here (docs/design.md#approvals-and-steering)."""
        path, writing = self.path(), self._writing
        if writing and (writing[0].parent_id or "") == self.leaf:
            path.extend(writing)
        return pending_items(path)

    def views(self) -> tuple[list[Message], list[Message]]:
        """``raw_model_view`` and ``model_view`` of the active path (new lists)."""
        return self._active_path().views()

    def _active_path(self) -> _ActivePath:
        active = self._active
        if active is None or active.leaf != self.leaf:
            active = _ActivePath(self.leaf, tree_path(self.index, self.leaf))
            self._active = active
        return active

    # -- writes ------------------------------------------------------------------------------

    def apply(self, stamped: Stamped) -> None:
        """Record a stored batch: extend log and index, move the leaf."""
        old_leaf = self.leaf
        self.log.extend(stamped.copies)
        for entry in stamped.durable:
            self.index[entry.id] = entry
        self.leaf = stamped.leaf_id
        active, durable = self._active, stamped.durable
        if (
            active is not None
            and durable
            and active.leaf == old_leaf
            and durable[0].parent_id == (old_leaf or None)
        ):
            active.extend(stamped.leaf_id, durable)  # stamp() chains the durable copies

    def apply_receipt(self, entries: Sequence[Entry], leaf_id: str) -> None:
        """Follow a remote run's receipt (Temporal executor)."""
        for entry in entries:
            if entry.id not in self.index:
                self.log.append(entry)
                self.index[entry.id] = entry
        self.leaf = leaf_id
        self.created = True  # the run that sent it opened the session first

    async def commit(self, stamped: Stamped, guard: Guard | None = None) -> None:
        """Store a stamped batch in one append and apply it; on failure nothing changes.
        ``guard``: stored only if it holds, else :class:`LeafMovedOn`."""
        async with self.lock:
            await self._write(stamped, guard)

    async def persist(
        self,
        entries: Sequence[Entry],
        *,
        keep_ids: bool = False,
        guarded: bool = False,
    ) -> Stamped:
        """Stamp ``entries`` at the leaf as it is under the lock, store and apply them.

        The busy rule is checked again under the lock: an append that waited for the lock while
        a run started is refused rather than chained from a leaf the run moves.
        ``keep_ids``: an entry that has an ID keeps it (a decision's derived ID).
        ``guarded``: stored only if the session's newest entry is still the newest this
        handle knows, else :class:`LeafMovedOn` (a store that cannot tell appends unguarded).
        """
        async with self.lock:
            self.check_mutable()
            stamped = stamp(entries, self.leaf, utc_now(), new_id, keep_ids=keep_ids)
            await self._write(stamped, Guard(self.known_last()) if guarded else None)
            return stamped

    def known_last(self) -> str | None:
        """The newest stored entry this handle knows (``None``: none): what a guarded write
        expects the store's newest to be still."""
        return next((e.id for e in reversed(self.log) if e.id in self.index), None)

    def follow(self, stored: Sequence[Entry]) -> None:
        """Take in the session's entries as stored now (appends of other processes) and move
        the leaf to the newest of those new entries that goes on from it, if any: entries it
        knew already below the leaf are a branch it left (``branch`` above the tip)."""
        below = {self.leaf}
        for entry in stored:
            if entry.id in self.index:
                continue
            self.log.append(entry)
            self.index[entry.id] = entry
            if (entry.parent_id or "") in below:
                below.add(entry.id)
                self.leaf = entry.id

    async def catch_up(self) -> None:
        """Take in what other processes stored since this handle read the session (another
        shell's run on it), as :meth:`follow` does: a guarded write then expects the store's
        newest entry, not the one this handle last saw. Nothing while none is stored."""
        try:
            stored = await self.store.load_entries(self.session_id)
        except SessionNotFoundError:
            return
        async with self.lock:
            self.follow(stored)
            self.created = True

    def _append(self, durable: list[Entry], guard: Guard | None) -> Awaitable[bool]:
        if guard is not None and isinstance(self.store, GuardedStore):
            return self.store.append_if_last(self.session_id, durable, guard.last_id)

        async def append() -> bool:
            await self.store.append_entries(self.session_id, durable)
            return True

        return append()

    async def _write(self, stamped: Stamped, guard: Guard | None = None) -> None:
        cancelled = False
        if stamped.durable and not self.created:
            await open_session(self.store, self.session_id)
            self.created = True
        if stamped.durable:
            self._writing = stamped.durable
            try:
                write, cancelled = await see_through(self._append(stamped.durable, guard))
            finally:
                self._writing = []
            if write.cancelled():
                raise asyncio.CancelledError()
            exc = write.exception()
            if exc is not None:
                if not isinstance(exc, NOTHING_WRITTEN):
                    self.unsettled.extend(e.id for e in stamped.durable)
                raise exc
            if not write.result():
                raise LeafMovedOn(self.session_id)
        self.apply(stamped)
        if cancelled:
            raise asyncio.CancelledError()


class _ActivePath:
    """The active path and its model views, cached for one leaf and extended as runs append.

    A leaf's path never changes (stored entries are immutable and the index only gains new IDs),
    so the cache is keyed by the leaf; a batch chained from the cached leaf extends it instead of
    re-walking the tree, and the views grow incrementally, so a run's cost does not scale with
    the transcript. Repair (docs/design.md#repair-and-reconcile) splits at any message that is not a
    ``tool_result``: the contiguous results an assistant message consumes end before it. ``settled``
    is the repaired view of ``raw[:split]``; only the tail from ``split`` is repaired on each read.
    """

    def __init__(self, leaf: str, path: list[Entry]) -> None:
        self.leaf = leaf
        self.path = path
        self.raw: list[Message] | None = None
        self.settled: list[Message] = []
        self.split = 0

    def extend(self, leaf: str, entries: Sequence[Entry]) -> None:
        self.leaf = leaf
        self.path.extend(entries)
        if self.raw is None:
            return
        if any(isinstance(e, CompactionEntry) for e in entries):
            self.raw = None  # a new last compaction re-projects the view
        else:
            self.raw.extend(e.message for e in entries if isinstance(e, MessageEntry))

    def views(self) -> tuple[list[Message], list[Message]]:
        if self.raw is None:
            self.raw, self.settled, self.split = raw_model_view(self.path), [], 0
        raw = self.raw
        k = len(raw) - 1
        while k > self.split and raw[k].role == "tool_result":
            k -= 1
        if k > self.split:
            self.settled.extend(repair_tool_calls(raw[self.split : k]))
            self.split = k
        return list(raw), self.settled + repair_tool_calls(raw[self.split :])
