"""Live deltas in motion: the worker's writer and the client's follower.

**Writer** (worker side). The model loop hands every partial to :meth:`DeltaWriter.offer`, which
never waits; a background task publishes the difference since the last published partial at most
once per ``every`` seconds, so a fast model costs one store write per batch, not per token. A
failed write stops publishing for this attempt (a reader would otherwise see a hole it cannot
fill): the client then catches up from the stored message. Nothing here can fail or slow the
model call.

**Follower** (client side). :class:`DeltaFollower` watches the run's recorded events (from the
workflow's ``events`` query) for an assistant ``message_start``, reads that reply's deltas while it
streams, and yields each rebuilt partial as a ``message_update``, as the in-process stream does. A
delta is taken only if it is the next ``seq`` of the attempt being shown, or ``seq`` 1 of a later
attempt: the model call was retried (a crashed worker), and that first update carries
``restart=True``. A client attaching late jumps straight to the latest attempt, and once
``message_end`` is recorded it gets no deltas at all for that reply. At ``message_end`` the stored
message wins: if what was shown is not exactly its content, one last update brings it there
(``restart=True`` when that is not an extension of what was shown), so the text a consumer built
always ends equal to the stored message.

**Which channel.** ``create_worker`` and ``TemporalExecutor`` take ``live_deltas``: ``"auto"``
(the default) is the store's own channel when the store has one (:class:`LiveStore`), so worker
and clients agree without configuration; a store without one streams nothing unless both sides
are given a channel. See docs/design.md#live-deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal

from ..agent.events import AgentEvent
from ..ai.messages import Message
from ..session.deltas import (
    Cursor,
    Delta,
    DeltaChannel,
    DeltaKey,
    LiveStore,
    apply_patch,
    diff_patch,
)
from ..session.entries import MessageEntry
from .events import Event

__all__ = [
    "DEFAULT_BATCH_EVERY",
    "DEFAULT_CLEAR_AFTER",
    "DEFAULT_POLL",
    "IDLE_POLL",
    "DeltaFollower",
    "DeltaWriter",
    "LiveDeltas",
    "clear_later",
    "live_channel",
    "writer_for",
]

logger = logging.getLogger("durable_agent.live")

LiveDeltas = DeltaChannel | Literal["auto"] | None
"""What ``create_worker`` and ``TemporalExecutor`` accept: a channel, ``"auto"`` (the store's own
channel, the default) or ``None`` (no live deltas)."""


def live_channel(live: LiveDeltas, store: object) -> DeltaChannel | None:
    """The channel ``live`` names for ``store``: ``"auto"`` is the store's own, if it has one."""
    if live == "auto":
        return store.live_deltas() if isinstance(store, LiveStore) else None
    return live


# -- writer (worker side) ---------------------------------------------------------------------

DEFAULT_BATCH_EVERY = 0.05
"""Seconds between two writes of one reply (the first partial is written at once)."""
DEFAULT_CLEAR_AFTER = 5.0
"""Seconds a stored reply's deltas stay, so a client polling slowly still drains them."""

FINISH_TIMEOUT = 2.0
"""Seconds :meth:`DeltaWriter.finish` waits for its last writes."""

_pending: set[asyncio.Task[None]] = set()


class DeltaWriter:
    """Publishes one attempt of one reply; ``seq`` counts from 1 per attempt."""

    def __init__(
        self,
        channel: DeltaChannel,
        key: DeltaKey,
        attempt: int,
        *,
        every: float = DEFAULT_BATCH_EVERY,
    ) -> None:
        self.channel = channel
        self.key = key
        self.attempt = attempt
        self.every = every
        self.published = 0
        self._latest: Message | None = None
        self._sent: Message | None = None
        self._dirty = asyncio.Event()
        self._stop = asyncio.Event()
        self._closing = False
        self._failed = False
        self._task = asyncio.create_task(self._loop())

    def offer(self, partial: Message) -> None:
        """The reply so far (replaces the previous offer). The empty partial a stream starts
        with is its ``message_start``, not an update: it is not published."""
        if self._sent is None and not partial.content:
            return
        self._latest = partial
        self._dirty.set()

    async def _publish(self) -> None:
        latest = self._latest
        if latest is None or self._failed:
            return
        patch = diff_patch(self._sent, latest)
        if patch is None:
            return
        head, size, ops = patch
        delta = Delta(attempt=self.attempt, seq=self.published + 1, head=head, size=size, ops=ops)
        try:
            await self.channel.publish(self.key, delta)
        except Exception:
            self._failed = True
            logger.warning("live deltas of %s stopped", self.key.name(), exc_info=True)
            return
        self.published += 1
        self._sent = latest

    async def _loop(self) -> None:
        while not self._closing:
            await self._dirty.wait()
            if self._closing:
                return
            self._dirty.clear()
            await self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every)

    def stop(self) -> None:
        """Stop publishing (a write in flight still completes); safe to call more than once."""
        self._closing = True
        self._stop.set()
        self._dirty.set()

    async def finish(self, final: Message) -> None:
        """Publish ``final`` (what is left of the reply) and stop: the channel then holds the
        whole reply before it is stored."""
        self._latest = final
        self.stop()
        try:
            # best effort: a store that stops answering must not hold up the reply's commit
            await asyncio.wait_for(self._finish(), FINISH_TIMEOUT)
        except TimeoutError:
            self._failed = True
            logger.warning("live deltas of %s: final write timed out", self.key.name())

    async def _finish(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._publish()


def writer_for(
    channel: DeltaChannel | None, session_id: str, run_id: str, position: int, attempt: int
) -> DeltaWriter | None:
    """A writer for one model-call attempt, or ``None`` without a channel or a key (a call made
    outside a run, with no run ID or event position, has no reply to key)."""
    if channel is None or not run_id or position <= 0:
        return None
    return DeltaWriter(channel, DeltaKey(session_id, run_id, position), attempt)


def clear_later(channel: DeltaChannel, key: DeltaKey, after: float = DEFAULT_CLEAR_AFTER) -> None:
    """Clear ``key`` in the background after ``after`` seconds (best effort: the channel's TTL
    or the next reply's clear covers a worker that stops first)."""

    async def run() -> None:
        await asyncio.sleep(after)
        try:
            await channel.clear(key)
        except Exception:
            logger.warning("could not clear live deltas of %s", key.name(), exc_info=True)

    task = asyncio.get_running_loop().create_task(run())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


# -- follower (client side) ------------------------------------------------------------------

DEFAULT_POLL = 0.02
"""Seconds between two reads of the channel while deltas arrive."""
IDLE_POLL = 0.1
"""The longest gap between two reads while none arrive (a model still thinking, a worker that
publishes nothing): the poll interval grows from ``DEFAULT_POLL`` to this, so idle readers cost
the store ten reads a second, not fifty."""
READ_TIMEOUT = 2.0
"""Seconds a channel read may take before the reader gives up on it (and tries again)."""
IDLE_AFTER = 0.3
"""Seconds without a delta after which a reader counts as idle (writers batch every 50 ms)."""


def _extends(shown: Message, final: Message) -> bool:
    """Whether ``final`` only grows what ``shown`` showed: every shown block is still there, of
    the same kind, text and thinking only appended to, a tool call still the same call (its
    arguments may have grown, an empty ID been filled in)."""
    if len(final.content) < len(shown.content):
        return False
    for old, new in zip(shown.content, final.content, strict=False):
        a, b = old.model_dump(), new.model_dump()
        if a.get("type") != b.get("type"):
            return False
        kind = a.get("type")
        if kind in ("text", "thinking"):
            if not str(b.get(kind, "")).startswith(str(a.get(kind, ""))):
                return False
        elif kind == "tool_call":
            if a.get("name") != b.get("name") or a.get("id") not in ("", b.get("id")):
                return False
        elif a != b:
            return False
    return True


class DeltaFollower:
    """Follows the streaming replies of one run, one at a time."""

    def __init__(
        self, channel: DeltaChannel, session_id: str, run_id: str, *, poll: float = DEFAULT_POLL
    ) -> None:
        self.channel = channel
        self.session_id = session_id
        self.run_id = run_id
        self.poll_every = poll
        self._interval = poll
        self._last_delta = 0.0
        self._key: DeltaKey | None = None
        self._cursor: Cursor = (0, 0)
        self._head: dict[str, Any] = {}
        self._blocks: list[dict[str, Any]] = []
        self._shown: Message | None = None

    @property
    def open(self) -> bool:
        """A reply is streaming (its ``message_start`` seen, its ``message_end`` not yet)."""
        return self._key is not None

    def _wrap(self, inner: AgentEvent) -> Event:
        return Event(type="agent", session_id=self.session_id, agent=inner)

    async def see(self, event: Event, position: int) -> list[Event]:
        """Call with each recorded event before delivering it; returns the updates that go first."""
        inner = event.agent
        if inner is None or inner.message is None or inner.message.role != "assistant":
            return []
        if inner.type == "message_start":
            self._key = DeltaKey(self.session_id, self.run_id, position)
            self._cursor, self._head, self._blocks, self._shown = (0, 0), {}, [], None
            self._interval = self.poll_every
            self._last_delta = asyncio.get_running_loop().time()
            return []
        if inner.type != "message_end" or self._key is None:
            return []
        stored = event.entries[0] if event.entries else None
        final = stored.message if isinstance(stored, MessageEntry) else inner.message
        out: list[Event] = []
        if self._shown is not None:  # nothing shown: a late client gets no deltas, as promised
            out = await self.poll()
            shown = self._shown
            if shown.content != final.content:
                restart = not _extends(shown, final)
                out.append(
                    self._wrap(AgentEvent(type="message_update", message=final, restart=restart))
                )
        self._key, self._shown = None, None
        return out

    async def poll(self) -> list[Event]:
        """The updates published since the last poll (``[]`` on a channel error: best effort)."""
        key = self._key
        if key is None:
            return []
        try:
            # a store that stops answering must not hold up the receipts behind it
            deltas = await asyncio.wait_for(self.channel.read(key, self._cursor), READ_TIMEOUT)
        except Exception as exc:
            logger.debug("reading live deltas of %s: %s", key.name(), exc)
            return []
        return [self._wrap(e) for e in self._take(deltas)]

    def _take(self, deltas: list[Delta]) -> list[AgentEvent]:
        attempt, seq = self._cursor
        starts = [d.attempt for d in deltas if d.seq == 1 and d.attempt > attempt]
        target = max(starts, default=attempt)
        out: list[AgentEvent] = []
        for delta in deltas:
            if delta.attempt != target:
                continue
            restart = False
            if delta.attempt > attempt:
                # seq 1 of a later attempt: the call was retried, the reply starts over
                restart = self._shown is not None
                self._head, self._blocks = {}, []
            elif delta.seq != seq + 1:
                break  # a hole (a lost write): wait for a later attempt or the stored message
            self._head, self._blocks, message = apply_patch(self._head, self._blocks, delta)
            attempt, seq = delta.attempt, delta.seq
            self._cursor, self._shown = (attempt, seq), message
            out.append(AgentEvent(type="message_update", message=message, restart=restart))
        return out

    async def follow(self, put: Any, done: asyncio.Future[Any], duration: float) -> None:
        """Poll for ``duration`` seconds (or until ``done``), handing each update to ``put``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + duration
        while True:
            updates = await self.poll()
            for update in updates:
                put(update)
            now = loop.time()
            if updates:
                self._last_delta = now
            if now - self._last_delta < IDLE_AFTER:
                self._interval = self.poll_every
            else:
                self._interval = min(self._interval * 1.5, max(IDLE_POLL, self.poll_every))
            remaining = deadline - loop.time()
            if remaining <= 0 or done.done():
                return
            await asyncio.wait({done}, timeout=min(self._interval, remaining))
