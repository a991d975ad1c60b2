"""Following a session as it grows: its stored entries, and the live deltas of a reply streaming.

:class:`SessionFollower` reads a session's entries after a seq (an entry's 1-based position in
append order), polling with back-off, woken by live-channel activity and the store's append feed:
a run's client stream and the HTTP stream follow a session so (docs/design.md#following-a-session).

:class:`DeltaFollower` reads the live deltas of one run's replies (docs/design.md#live-deltas) as
``message_update`` events, as the in-process stream gives them. A delta is taken only if it is
the next ``seq`` of the attempt shown, or ``seq`` 1 of a later attempt (the call was retried:
``restart=True``); a client attaching late jumps to the latest attempt, and gets no deltas of a
stored reply. At the reply's receipt the stored message wins: one last update brings the text
to it (``restart=True`` if no extension). Deltas read together are one update (``delta``: the
text it adds). Each read is timed just after the writer's next write is due (a delta's time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from ..agent.events import AgentEvent
from ..ai.messages import Message
from ..session.deltas import (
    FASTEST_WRITE,
    SLOWEST_WRITE,
    WRITE_EVERY,
    Cursor,
    Delta,
    DeltaChannel,
    DeltaKey,
    ImmediateChannel,
)
from ..session.entries import Entry
from ..session.errors import SessionNotFoundError, StoreUnavailableError
from ..session.store import AppendFeed, AppendWatch, RetentionStore, Store, seq_reader
from .partial import PartialReply, copied, extends

__all__ = ["PUSHED_READ", "DeltaFollower", "SessionFollower"]

logger = logging.getLogger("durable_agent.live")

PUSHED_READ = 5.0
"""Seconds between two reads at most while the store's append feed (waking at each append) is up."""
CONFIRM_EVERY = 10.0
"""Seconds at most between two reads of the session's record by reads that find nothing."""


class SessionFollower:
    """Follow one session from seq ``after``: new entries in seq order, each once.

    :meth:`read` reads once, now; :meth:`next` waits for the next read that finds something;
    ``async for seq, entry in follower`` yields them for ever. Between reads it waits ``fastest``
    seconds after a read that found entries, ``growth`` times longer after each that found none,
    up to ``slowest``; :meth:`wake` (on live-channel activity: a reply streaming, a run starting)
    makes the next read due at once and restarts the back-off. A store that is down reads as
    nothing new; any other error is raised, ``SessionNotFoundError`` (unless ``missing_ok``) also
    for a session deleted and created again (:meth:`_fetch`). An entry ID already yielded is
    skipped (seqs may shift under concurrent writers). On a store with an append feed
    (:class:`~durable_agent.session.store.AppendFeed`) it watches the session from its first
    read: each append wakes it and calls ``on_wake`` (for a reader asleep on its own timer), the
    back-off grows to :data:`PUSHED_READ` while the feed is up; :meth:`close` ends the watch."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        after: int = 0,
        *,
        fastest: float = 0.05,
        slowest: float = 1.0,
        growth: float = 2.0,
        missing_ok: bool = False,
        on_wake: Callable[[], None] | None = None,
        born: datetime | None = None,
    ) -> None:
        self.store = store
        self.missing_ok = missing_ok
        """A session not created yet reads as empty (a Temporal run creates its session)."""
        self.session_id = session_id
        self.after = after
        """The seq of the last entry read (the cursor)."""
        self.fastest, self.slowest, self.growth = fastest, slowest, growth
        self._wait, self._due = fastest, 0.0
        self.read_at = float("-inf")
        """When (the event loop's clock) the last read was."""
        self._seen: set[str] = set()
        self._woken = asyncio.Event()
        self._read = seq_reader(store)
        self._on_wake = on_wake or (lambda: None)
        self._feed = store if isinstance(store, AppendFeed) else None
        self._watch: AppendWatch | None = None
        self._records = store.load_session if isinstance(store, RetentionStore) else None
        self.born = born  # its record's created_at (:meth:`_fetch`), if the caller just read it
        self._confirmed = float("-inf")

    @property
    def pushed(self) -> bool:
        """The store's append feed wakes this follower (module doc)."""
        return self._watch is not None and self._watch.live

    def close(self) -> None:
        """Stop watching the store's append feed (reads still work, on the back-off alone)."""
        self._feed = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def _pushed(self) -> None:
        self.wake()
        self._on_wake()

    def wake(self) -> None:
        """Something happened on the session: read at once, and fast for a while."""
        self._wait, self._due = self.fastest, 0.0
        self._woken.set()

    def defer(self, seconds: float) -> None:
        """Make the next read due in ``seconds`` unless woken first (none finds news sooner)."""
        self._due = asyncio.get_running_loop().time() + seconds

    def has_read(self, entry_id: str) -> bool:
        """Whether a read yielded the entry ``entry_id`` (one stored after the start seq)."""
        return entry_id in self._seen

    @property
    def woken(self) -> bool:
        """:meth:`wake` was called since the last read."""
        return self._woken.is_set()

    def due_in(self) -> float:
        """Seconds until the next read is due (0 when it is)."""
        return max(0.0, self._due - asyncio.get_running_loop().time())

    async def read(self) -> list[tuple[int, Entry]]:
        """One read now: the entries after the cursor (the cursor moves past them)."""
        self._woken.clear()
        self.read_at = asyncio.get_running_loop().time()
        if self._watch is None and self._feed is not None:  # before the read: nothing slips by
            self._watch = self._feed.watch_appends(self.session_id, self._pushed)
        try:
            found = await self._fetch()
        except (StoreUnavailableError, SessionNotFoundError) as exc:
            if isinstance(exc, SessionNotFoundError) and not self.missing_ok:
                raise
            logger.debug("following %s: %s", self.session_id, exc)
            found = []
        new = [(seq, e) for seq, e in found if e.id not in self._seen]
        if found:
            self.after = max(self.after, found[-1][0])
        self._seen.update(e.id for _, e in new)
        slowest = max(self.slowest, PUSHED_READ) if self.pushed else self.slowest
        self._wait = self.fastest if new else min(self._wait * self.growth, slowest)
        self._due = asyncio.get_running_loop().time() + self._wait
        return new

    async def _fetch(self) -> list[tuple[int, Entry]]:
        """The entries after the cursor, of the session the first read found: its record's
        ``created_at``, read before it, is read again when they may be another's (:meth:`_unsure`:
        a session created again numbers from 1 too), ``SessionNotFoundError`` if it differs."""
        records, first = self._records, self._confirmed == float("-inf")  # no read yet
        if records is not None and first:
            self.born = self.born or (await records(self.session_id)).created_at
            self._confirmed = self.read_at
        found = await self._read(self.session_id, self.after)
        if records is not None and not first and self._unsure(found):
            self._confirmed = asyncio.get_running_loop().time()
            if (await records(self.session_id)).created_at != self.born:
                raise SessionNotFoundError(self.session_id)
        return found

    def _unsure(self, found: list[tuple[int, Entry]]) -> bool:
        """Whether ``found`` may be another session's: an entry hangs off one not yielded (the
        cursor's in the new session, a root; in the same session a branch off an entry before
        the start seq), or reads found nothing for :data:`CONFIRM_EVERY` seconds."""
        if not found:
            return asyncio.get_running_loop().time() - self._confirmed >= CONFIRM_EVERY
        seen, batch = self._seen, set()
        for _, entry in found:
            parent = entry.parent_id or ""  # a root's: no entry's ID
            if entry.id not in seen and parent not in seen and parent not in batch:
                return True
            batch.add(entry.id)
        return False

    async def next(self) -> list[tuple[int, Entry]]:
        """Wait for (and return) the next entries: reads when due or woken, until some come."""
        while True:
            delay = self.due_in()
            if delay > 0 and not self._woken.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), delay)
            found = await self.read()
            if found:
                return found

    async def __aiter__(self) -> AsyncIterator[tuple[int, Entry]]:
        while True:
            for item in await self.next():
                yield item


# -- live deltas ----------------------------------------------------------------------------------

FAST_POLL = WRITE_EVERY
"""Seconds between two reads of the channel while deltas arrive, as often as writers write:
each read is a wake-up of the client's event loop, what following a reply costs it."""
WRITE_LAG = 0.05
"""Seconds after the writer's next write is due that the reader reads: the writer writes at
the model's first token once due, so a read this much later finds it, as a rule."""
MISSED_POLL = 0.1
"""Seconds to the next read after one that found nothing new while deltas arrive (a slow
token); the wait doubles while none arrive, up to ``IDLE_POLL``."""
FIRST_POLL = 0.1
"""Seconds to the first read of a reply's deltas; the wait doubles while none arrive (a model
still thinking) up to ``IDLE_POLL``."""
IDLE_POLL = 0.25
"""A reply may stream for less than a second (one that starts a while after its turn was
expected, say after a continue-as-new): read at least this often, it still shows live."""
IDLE_MARGIN = 0.25
"""Seconds past its writer's pace without a delta after which a reply counts as idle (its
store reads resume): a write at that pace is overdue."""
READ_TIMEOUT = 2.0
"""Seconds a channel read may take before the reader gives up on it (and tries again)."""


def pace_of(every: float | None) -> float:
    """A writer's pace as a delta names it; ``FAST_POLL`` for none, or for one no worker can be
    given (a damaged side channel must not stop a reader's reads, or hurry them)."""
    if every is None or not FASTEST_WRITE <= every <= SLOWEST_WRITE:  # NaN too
        return FAST_POLL
    return every


def next_write_in(at: float | None, every: float | None = None) -> float:
    """Seconds until just after the writer's next write, due ``every`` (its pace,
    :func:`pace_of`) after the one it wrote at ``at`` (its clock): reads in step with the writes
    find one each, as soon as it is there. The pace for a delta without its time; never more
    than the pace plus the lag, nor less than the lag, whatever the two clocks say."""
    pace = pace_of(every)
    if at is None:
        return pace
    return min(max(at + pace + WRITE_LAG - time.time(), WRITE_LAG), pace + WRITE_LAG)


_UPDATE = AgentEvent.model_construct(type="message_update")
"""What each update is a copy of (a copy costs less than building one field by field)."""


class DeltaFollower:
    """Follows the streaming replies of one run, one at a time (module doc): :meth:`expect`
    names the reply (its turn), :meth:`poll` reads, :meth:`finish` closes it at its receipt."""

    def __init__(self, channel: DeltaChannel, session_id: str, run_id: str) -> None:
        self.channel = channel
        self._read_now = channel.read_now if isinstance(channel, ImmediateChannel) else None
        """The channel's own read, when it never waits: no timeout around it."""
        self.session_id, self.run_id = session_id, run_id
        self.final = False
        """The reply's last delta was read: its entry is being stored."""
        self.parent: str | None = None  # the entry the reply hangs off, as its writer named it
        self._key: DeltaKey | None = None
        self._cursor: Cursor = (0, 0)
        self._partial = PartialReply()
        self._shown: Message | None = None
        self._text = ""
        self._last_delta = float("-inf")
        self._pace = FAST_POLL
        """The writer's seconds between two writes, as its last delta said."""
        self._due, self._idle_wait = 0.0, FIRST_POLL

    @property
    def turn(self) -> int | None:
        return None if self._key is None else self._key.turn

    @property
    def shown(self) -> Message | None:
        """The partial reply the updates so far showed."""
        return self._shown

    def expect(self, turn: int) -> None:
        """Follow the reply of ``turn`` (from its first delta), unless already following it."""
        if self._key is not None and self._key.turn == turn:
            return
        self._key = DeltaKey(self.session_id, self.run_id, turn)
        self._cursor, self._partial = (0, 0), PartialReply()
        self._shown, self._text, self.final, self.parent = None, "", False, None
        self._due, self._idle_wait, self._last_delta = 0.0, FIRST_POLL, float("-inf")

    @property
    def busy(self) -> bool:
        """Deltas are arriving: the reply streams (its last one will say when it is stored)."""
        if self._key is None or self._shown is None or self.final:
            return False
        return asyncio.get_running_loop().time() - self._last_delta < self._pace + IDLE_MARGIN

    def due_in(self) -> float:
        """Seconds until the next read is due (``inf`` when no reply is followed)."""
        if self._key is None:
            return float("inf")
        return max(0.0, self._due - asyncio.get_running_loop().time())

    @property
    def immediate(self) -> bool:
        """Whether the channel never waits (an ``ImmediateChannel``): :meth:`poll_now` reads."""
        return self._read_now is not None

    async def poll(self) -> AgentEvent | None:
        """One read: the deltas published since the last, as one ``message_update`` (``None``
        when there are none, or on a channel error: best effort)."""
        key = self._key
        if key is None or self._read_now is not None:
            return self.poll_now()
        now = asyncio.get_running_loop().time()
        try:
            # a store that stops answering must not hold up the receipts behind it
            async with asyncio.timeout(READ_TIMEOUT):
                deltas = await self.channel.read(key, self._cursor)
        except Exception as exc:
            logger.debug("reading live deltas of %s: %s", key.name(), exc)
            deltas = []
        return self._took(key, deltas, now)

    def poll_now(self) -> AgentEvent | None:
        """:meth:`poll` on an :attr:`immediate` channel, done now (``None`` on any other): a
        caller may read from a timer's callback, with no task to wake for it."""
        key = self._key
        if key is None or self._read_now is None:
            return None
        now = asyncio.get_running_loop().time()
        try:
            deltas = self._read_now(key, self._cursor)
        except Exception as exc:
            logger.debug("reading live deltas of %s: %s", key.name(), exc)
            deltas = []
        return self._took(key, deltas, now)

    def _took(self, key: DeltaKey, deltas: list[Delta], now: float) -> AgentEvent | None:
        """The update of one read's ``deltas``, and when the next read is due."""
        update = self._take(deltas) if deltas and self._key == key else None
        if update is not None:
            self._last_delta, self._idle_wait = now, MISSED_POLL
            self._pace = pace_of(deltas[-1].every)
            self._due = now + next_write_in(deltas[-1].at, deltas[-1].every)
        else:
            self._due = now + self._idle_wait
            self._idle_wait = min(self._idle_wait * 2, IDLE_POLL)
        return update

    def _take(self, deltas: list[Delta]) -> AgentEvent | None:
        attempt, seq = self._cursor
        starts = [d.attempt for d in deltas if d.seq == 1 and d.attempt > attempt]
        target = max(starts, default=attempt)
        restart = False
        message: Message | None = None
        for delta in deltas:
            if delta.attempt != target:
                continue
            if delta.attempt > attempt:
                # seq 1 of a later attempt: the call was retried, the reply starts over
                restart = restart or self._shown is not None or message is not None
                self._partial = PartialReply()
            elif delta.seq != seq + 1:
                break  # a hole (a lost write): wait for a later attempt or the stored message
            message, self.parent = self._partial.apply(delta), delta.parent or self.parent
            attempt, seq = self._cursor = (delta.attempt, delta.seq)
            self.final = delta.final
        if message is None:
            return None
        return self._update(message, restart)

    def _update(self, message: Message, restart: bool) -> AgentEvent:
        text = message.text()
        if restart or not text.startswith(self._text):
            delta, restart = text, restart or bool(self._text)
        else:
            delta = text[len(self._text) :]
        self._shown, self._text = message, text
        # copied unvalidated: every field is of its type already, and this runs per update
        return copied(_UPDATE, {"message": message, "restart": restart, "delta": delta})

    async def finish(self, stored: Message) -> list[AgentEvent]:
        """The reply's receipt is here: its last updates, then stop following it. Nothing for a
        reply that showed nothing (a late client gets no deltas of a stored reply); no read
        after its ``final`` delta (whatever a later attempt streamed, the stored message
        below brings the text to it)."""
        out: list[AgentEvent] = []
        if self._shown is not None:
            last = None if self.final else await self.poll()
            if last is not None:
                out.append(last)
            shown = self._shown
            if shown.content != stored.content:
                out.append(self._update(stored, not extends(shown, stored)))
        # the next reply's receipt may come in this read, before its expect(): none of this text
        self._key, self._shown = None, None
        return out
