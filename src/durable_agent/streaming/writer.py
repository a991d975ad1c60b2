"""The worker side: publish a streaming reply's partials as batched deltas.

The model loop hands every partial to :meth:`DeltaWriter.offer`, which never waits; a background
task publishes the difference since the last published partial at most once per ``every``
seconds, so a fast model costs one store write per batch, not per token. A failed write stops
publishing for this attempt (a reader would otherwise see a hole it cannot fill): the client then
catches up from the stored message. Nothing here can fail or slow the model call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..ai.messages import Message
from .channel import DeltaChannel, DeltaKey
from .patch import Delta, diff_patch

__all__ = [
    "DEFAULT_BATCH_EVERY",
    "DEFAULT_CLEAR_AFTER",
    "DeltaWriter",
    "clear_later",
    "writer_for",
]

logger = logging.getLogger("durable_agent.streaming")

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
    """A writer for one model-call attempt, or ``None`` without a channel or a key (a workflow
    started before live deltas sends no run ID)."""
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
