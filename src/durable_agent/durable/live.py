"""Live deltas on the worker: the reply's writer and which channel to use.

**Writer.** The model loop hands every partial to :meth:`DeltaWriter.offer`, which never waits; a
write of the difference since the last written partial goes out at most once per ``every``
seconds (1 s by default; the first at once), from the offer that finds it due, so a fast
model costs one store write per batch, not per token, and streaming adds no wake-up of the
worker's event loop beyond the model's own. Each delta carries the time it was written, so a
reader reads just after the next one is due (``durable.follow``). A failed write stops
publishing for this attempt (a reader would otherwise see a hole it cannot fill): the client
then catches up from the stored message. :meth:`DeltaWriter.finish` writes the rest marked
``final``, so a reader looks for the reply's entry at once. A channel that never waits (an
:class:`~durable_agent.session.deltas.ImmediateChannel`: side files) is written inline,
with no task per write. Nothing here can fail or slow the model call.

**Which channel.** ``create_worker`` and ``TemporalExecutor`` take ``live_deltas``: ``"auto"``
(the default) is the store's own channel when the store has one (:class:`LiveStore`), so worker
and clients agree without configuration; a store without one streams nothing unless both sides
are given a channel. See docs/design.md#live-deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Literal

from ..ai.messages import Message
from ..session.deltas import (
    WRITE_EVERY,
    Delta,
    DeltaChannel,
    DeltaKey,
    ImmediateChannel,
    LiveStore,
    Parts,
    diff_parts,
    parts,
)
from ..session.errors import SessionNotFoundError, StoreClosedError

__all__ = [
    "DEFAULT_BATCH_EVERY",
    "DEFAULT_CLEAR_AFTER",
    "DeltaWriter",
    "LiveDeltas",
    "clear_later",
    "keep",
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


# -- writer -------------------------------------------------------------------------------------

DEFAULT_BATCH_EVERY = WRITE_EVERY
"""Seconds between two writes of one reply (the first partial is written at once): a reader
reads just after each (the delta's ``at`` and ``every``), and each write costs the worker a
store write and each reader a wake-up (docs/design.md#live-deltas)."""
DEFAULT_CLEAR_AFTER = 5.0
"""Seconds a stored reply's deltas stay, so a client polling slowly still drains them."""

FINISH_TIMEOUT = 2.0
"""Seconds :meth:`DeltaWriter.finish` waits for its last writes."""

_pending: set[asyncio.Task[Any]] = set()
"""Background tasks of this module, held until they end (the loop keeps weak references)."""


def keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    """Hold a background task of this package until it ends."""
    _pending.add(task)
    task.add_done_callback(_pending.discard)
    return task


class DeltaWriter:
    """Publishes one attempt of one reply; ``seq`` counts from 1 per attempt."""

    def __init__(
        self,
        channel: DeltaChannel,
        key: DeltaKey,
        attempt: int,
        *,
        every: float = DEFAULT_BATCH_EVERY,
        parent: str | None = None,
    ) -> None:
        self.channel = channel
        self.key = key
        self.attempt = attempt
        self.every = every
        self.parent = parent
        """The entry the reply will hang off: named in the attempt's first delta."""
        self.published = 0
        self._now = channel.publish_now if isinstance(channel, ImmediateChannel) else None
        """The channel's own write, when it never waits: done inline, with no task."""
        self._loop = asyncio.get_running_loop()
        self._latest: Message | None = None
        self._sent: Message | None = None
        self._sent_parts: Parts = parts(None)
        """``_sent`` as the last patch saw it: each write dumps only the newer partial."""
        self._last_write = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._closing = False
        self._failed = False

    def offer(self, partial: Message) -> None:
        """The reply so far (replaces the previous offer). The empty partial a stream starts
        with is its ``message_start``, not an update: it is not published.

        A write that is due goes out from here, on the model's own wake-up; a timer (two
        intervals on, pushed back by every write) only writes what a model that paused left
        unwritten: a steadily streaming reply costs the worker no wake-up of its own."""
        if self._sent is None and not partial.content:
            return
        self._latest = partial
        if self._closing or self._failed or self._writing is not None:
            return
        if self._loop.time() - self._last_write >= self.every:
            self._write_now()
        elif self._timer is None:
            self._timer = self._loop.call_at(self._last_write + 2 * self.every, self._overdue)

    def _overdue(self) -> None:
        self._timer = None
        if self._writing is None and not self._closing and self._latest is not self._sent:
            self._write_now()

    def _write_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last_write = self._loop.time()
        if self._now is not None:
            self._publish_now(final=False)
            return
        self._writing = keep(self._loop.create_task(self._publish(final=False)))
        self._writing.add_done_callback(self._written)

    def _written(self, _: asyncio.Task[None]) -> None:
        self._writing = None
        if self._latest is not self._sent and not self._closing and self._timer is None:
            self._timer = self._loop.call_at(self._last_write + 2 * self.every, self._overdue)

    def _next(self, final: bool) -> tuple[Delta, Message, Parts] | None:
        """The delta that brings a reader from what was sent to the latest partial, with that
        partial and its parts; ``None`` when there is nothing to send."""
        latest = self._latest
        if latest is None or self._failed:
            return None
        latest_parts = _parts_after(self._sent, self._sent_parts, latest)
        patch = diff_parts(self._sent_parts, latest_parts)
        if patch is None and not final:
            return None
        head, size, ops = patch if patch is not None else (None, len(latest.content), [])
        delta = Delta(
            attempt=self.attempt,
            seq=self.published + 1,
            head=head,
            size=size,
            ops=ops,
            final=final,
            at=time.time(),
            every=self.every,
            parent=self.parent if self.published == 0 else None,
        )
        return delta, latest, latest_parts

    def _sent_now(self, delta: Delta, latest: Message, latest_parts: Parts) -> None:
        self.published = delta.seq
        self._sent, self._sent_parts = latest, latest_parts

    def _lost(self, exc: Exception) -> None:
        self._failed = True
        if isinstance(exc, SessionNotFoundError):  # deleted while the reply streams: expected
            logger.info("live deltas of %s stopped: its session was deleted", self.key.name())
            return
        logger.warning("live deltas of %s stopped", self.key.name(), exc_info=exc)

    def _publish_now(self, *, final: bool) -> None:
        assert self._now is not None
        try:  # a partial may have no JSON form (nesting deeper than the encoder goes)
            step = self._next(final)
            if step is None:
                return
            self._now(self.key, step[0])
        except Exception as exc:
            self._lost(exc)
            return
        self._sent_now(*step)

    async def _publish(self, *, final: bool) -> None:
        try:  # as in _publish_now
            step = self._next(final)
            if step is None:
                return
            await self.channel.publish(self.key, step[0])
        except Exception as exc:
            self._lost(exc)
            return
        self._sent_now(*step)

    def stop(self) -> None:
        """Stop publishing (a write in flight still completes); safe to call more than once."""
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def finish(self, final: Message) -> None:
        """Publish ``final`` (what is left of the reply, marked final) and stop: the channel
        then holds the whole reply before it is stored."""
        self.stop()
        if self._sent is None and not final.content:
            return
        self._latest = final
        if self._now is not None:
            self._publish_now(final=True)
            return
        try:
            # best effort: a store that stops answering must not hold up the reply's commit
            await asyncio.wait_for(self._finish(), FINISH_TIMEOUT)
        except TimeoutError:
            self._failed = True
            logger.warning("live deltas of %s: final write timed out", self.key.name())

    async def _finish(self) -> None:
        writing = self._writing
        if writing is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(writing)
        await self._publish(final=True)


_HEAD = tuple(name for name in Message.model_fields if name != "content")


def _parts_after(sent: Message | None, sent_parts: Parts, latest: Message) -> Parts:
    """``parts(latest)``, reusing what the last write dumped of ``sent``: its head when no field
    but the content changed, and each block that is still the same object (a streaming model
    builds each partial from the blocks of the previous one, and only the last one grows)."""
    if sent is None:
        return parts(latest)
    head = sent_parts[0]
    if any(getattr(latest, name) != getattr(sent, name) for name in _HEAD):
        head = latest.model_dump(mode="json", exclude={"content"})
    old, old_dumps = sent.content, sent_parts[1]
    blocks = [
        old_dumps[i] if i < len(old) and block is old[i] else block.model_dump(mode="json")
        for i, block in enumerate(latest.content)
    ]
    return head, blocks


def writer_for(
    channel: DeltaChannel | None,
    session_id: str,
    run_id: str,
    turn: int,
    attempt: int,
    every: float = DEFAULT_BATCH_EVERY,
    parent: str | None = None,
) -> DeltaWriter | None:
    """A writer for one model-call attempt of the reply that will hang off ``parent``, writing
    every ``every`` seconds, or ``None`` without a channel or a key (a call made outside a run,
    with no run ID or turn, has no reply to key)."""
    if channel is None or not run_id or turn <= 0:
        return None
    key = DeltaKey(session_id, run_id, turn)
    return DeltaWriter(channel, key, attempt, every=every, parent=parent)


def clear_later(
    channel: DeltaChannel, key: DeltaKey, after: float = DEFAULT_CLEAR_AFTER
) -> asyncio.Task[None]:
    """Clear ``key`` in the background after ``after`` seconds (best effort: the channel's TTL
    or the next reply's clear covers a worker that stops first, or whose store was closed)."""

    async def run() -> None:
        await asyncio.sleep(after)
        try:
            await channel.clear(key)
        except StoreClosedError:
            logger.debug("live deltas of %s left to expire: the store was closed", key.name())
        except Exception:
            logger.warning("could not clear live deltas of %s", key.name(), exc_info=True)

    return keep(asyncio.get_running_loop().create_task(run()))
