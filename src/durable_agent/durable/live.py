"""Live deltas on the worker: the reply's writer, the run's cancel note and which channel to use.

**Writer.** The model loop hands every partial to :meth:`DeltaWriter.offer`, which never waits; a
write of the difference since the last written partial goes out at most once per ``every``
seconds (the first at once), so a fast model costs one store write per batch, not per token,
and no task or timer runs between batches. A failed write stops publishing for this attempt (a
reader would otherwise see a hole it cannot fill): the client then catches up from the stored
message. :meth:`DeltaWriter.finish` writes the rest marked ``final``, so a reader looks for the
reply's entry at once. Nothing here can fail or slow the model call.

**Cancel notes.** A cancelled run writes a note under its run's turn-0 key
(:func:`~durable_agent.session.deltas.cancel_note`; the run workflow does it on its cancel path,
whoever cancelled it). :class:`CancelWatch` checks, a few times a second and in one read per
check where the channel can (``held``), the notes of the runs whose calls are in flight on this
worker, and cancels a call's task when its run's note appears: a streaming model call stops
within a fraction of a second, without a heartbeat per fraction of a second
(docs/design.md#cancellation).

**Which channel.** ``create_worker`` and ``TemporalExecutor`` take ``live_deltas``: ``"auto"``
(the default) is the store's own channel when the store has one (:class:`LiveStore`), so worker
and clients agree without configuration; a store without one streams nothing unless both sides
are given a channel. See docs/design.md#live-deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..ai.messages import Message
from ..session.deltas import (
    Delta,
    DeltaChannel,
    DeltaKey,
    LiveStore,
    cancel_note,
    diff_patch,
)

__all__ = [
    "CANCEL_CHECK_EVERY",
    "DEFAULT_BATCH_EVERY",
    "DEFAULT_CLEAR_AFTER",
    "CancelWatch",
    "DeltaWriter",
    "LiveDeltas",
    "Watched",
    "clear_later",
    "live_channel",
    "write_cancel_note",
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

DEFAULT_BATCH_EVERY = 0.1
"""Seconds between two writes of one reply (the first partial is written at once): ten writes a
second keep the text moving for a reader while costing the worker little."""
DEFAULT_CLEAR_AFTER = 5.0
"""Seconds a stored reply's deltas stay, so a client polling slowly still drains them."""

FINISH_TIMEOUT = 2.0
"""Seconds :meth:`DeltaWriter.finish` waits for its last writes."""

_pending: set[asyncio.Task[Any]] = set()
"""Background tasks of this module, held until they end (the loop keeps weak references)."""


def _keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
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
    ) -> None:
        self.channel = channel
        self.key = key
        self.attempt = attempt
        self.every = every
        self.published = 0
        self._loop = asyncio.get_running_loop()
        self._latest: Message | None = None
        self._sent: Message | None = None
        self._last_write = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._closing = False
        self._failed = False

    def offer(self, partial: Message) -> None:
        """The reply so far (replaces the previous offer). The empty partial a stream starts
        with is its ``message_start``, not an update: it is not published."""
        if self._sent is None and not partial.content:
            return
        self._latest = partial
        self._schedule()

    def _schedule(self) -> None:
        if self._closing or self._failed or self._timer is not None or self._writing is not None:
            return
        if self._latest is self._sent:
            return
        delay = max(0.0, self._last_write + self.every - self._loop.time())
        self._timer = self._loop.call_later(delay, self._write_now)

    def _write_now(self) -> None:
        self._timer = None
        if self._closing:
            return
        self._writing = _keep(self._loop.create_task(self._publish(final=False)))
        self._writing.add_done_callback(self._written)

    def _written(self, _: asyncio.Task[None]) -> None:
        self._writing = None
        self._last_write = self._loop.time()
        self._schedule()

    async def _publish(self, *, final: bool) -> None:
        latest = self._latest
        if latest is None or self._failed:
            return
        patch = diff_patch(self._sent, latest)
        if patch is None and not final:
            return
        head, size, ops = patch if patch is not None else (None, len(latest.content), [])
        seq = self.published + 1
        delta = Delta(attempt=self.attempt, seq=seq, head=head, size=size, ops=ops, final=final)
        try:
            await self.channel.publish(self.key, delta)
        except Exception:
            self._failed = True
            logger.warning("live deltas of %s stopped", self.key.name(), exc_info=True)
            return
        self.published = seq
        self._sent = latest

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


def writer_for(
    channel: DeltaChannel | None, session_id: str, run_id: str, turn: int, attempt: int
) -> DeltaWriter | None:
    """A writer for one model-call attempt, or ``None`` without a channel or a key (a call made
    outside a run, with no run ID or turn, has no reply to key)."""
    if channel is None or not run_id or turn <= 0:
        return None
    return DeltaWriter(channel, DeltaKey(session_id, run_id, turn), attempt)


def clear_later(channel: DeltaChannel, key: DeltaKey, after: float = DEFAULT_CLEAR_AFTER) -> None:
    """Clear ``key`` in the background after ``after`` seconds (best effort: the channel's TTL
    or the next reply's clear covers a worker that stops first)."""

    async def run() -> None:
        await asyncio.sleep(after)
        try:
            await channel.clear(key)
        except Exception:
            logger.warning("could not clear live deltas of %s", key.name(), exc_info=True)

    _keep(asyncio.get_running_loop().create_task(run()))


# -- cancel notes -------------------------------------------------------------------------------

CANCEL_CHECK_EVERY = 0.25
"""Seconds between two checks of the cancel notes of the runs with calls in flight."""
NOTE_KEPT = 60.0
"""Seconds a cancel note stays: a call of the run still starting meets it."""


async def write_cancel_note(channel: DeltaChannel, session_id: str, run_id: str) -> None:
    """Note that the run was cancelled (cleared again after a minute, best effort)."""
    key, note = cancel_note(session_id, run_id)
    await channel.publish(key, note)
    clear_later(channel, key, NOTE_KEPT)


@dataclass
class Watched:
    """One call whose run's cancel note is watched; ``fired`` once it cancelled the call."""

    key: DeltaKey
    task: asyncio.Task[Any]
    fired: bool = False


class CancelWatch:
    """The cancel notes of the runs whose calls are in flight on this worker (module doc)."""

    def __init__(self, channel: DeltaChannel, *, every: float = CANCEL_CHECK_EVERY) -> None:
        self.channel = channel
        self.every = every
        self._watched: list[Watched] = []
        self._checker: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, session_id: str, run_id: str) -> Iterator[Watched]:
        """Cancel the current task if run ``run_id``'s cancel note appears while in the block
        (``fired`` then tells that cancellation from Temporal's own)."""
        task = asyncio.current_task()
        assert task is not None
        watched = Watched(cancel_note(session_id, run_id)[0], task)
        self._watched.append(watched)
        if self._checker is None or self._checker.done():
            self._checker = _keep(asyncio.get_running_loop().create_task(self._check()))
        try:
            yield watched
        finally:
            self._watched.remove(watched)

    async def _check(self) -> None:
        while self._watched:
            await asyncio.sleep(self.every)
            keys = list({w.key for w in self._watched})
            try:
                noted = await self._noted(keys)
            except Exception as exc:  # best effort: Temporal's cancellation still arrives
                logger.debug("reading cancel notes: %s", exc)
                continue
            for watched in list(self._watched):
                if watched.key in noted and not watched.fired:
                    watched.fired = True
                    watched.task.cancel()

    async def _noted(self, keys: list[DeltaKey]) -> set[DeltaKey]:
        held = getattr(self.channel, "held", None)
        if held is not None:
            found: set[DeltaKey] = await held(keys)
            return found
        reads = await asyncio.gather(*(self.channel.read(k) for k in keys))
        return {k for k, deltas in zip(keys, reads, strict=True) if deltas}
