"""Live deltas on the worker: the reply's writer, the run's cancel note and which channel to use.

**Writer.** The model loop hands every partial to :meth:`DeltaWriter.offer`, which never waits; a
write of the difference since the last written partial goes out at most once per ``every``
seconds (0.35 s by default; the first at once), from the offer that finds it due, so a fast
model costs one store write per batch, not per token, and streaming adds no wake-up of the
worker's event loop beyond the model's own. Each delta carries the time it was written, so a
reader reads just after the next one is due (``durable.follow``). A failed write stops
publishing for this attempt (a reader would otherwise see a hole it cannot fill): the client
then catches up from the stored message. :meth:`DeltaWriter.finish` writes the rest marked
``final``, so a reader looks for the reply's entry at once. A channel that never waits (an
:class:`~durable_agent.session.deltas.ImmediateChannel`: side files) is written inline,
with no task per write. Nothing here can fail or slow the model call.

**Cancel notes.** A cancelled run writes a note under its run's turn-0 key
(:func:`~durable_agent.session.deltas.cancel_note`; the run workflow does it on its cancel path,
whoever cancelled it). :class:`CancelWatch` checks, in one read per check where the channel can
(``held``; inline on a channel that never waits), the notes of the runs whose calls are in
flight on this worker twice a second, and cancels a call's task when its run's note appears: a
streaming model call stops within a fraction of a second, without a heartbeat per fraction of a
second
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
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
    cancel_note,
    diff_parts,
    parts,
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

DEFAULT_BATCH_EVERY = WRITE_EVERY
"""Seconds between two writes of one reply (the first partial is written at once): about three
writes a second keep the text moving for a reader, who reads just after each (the delta's
``at``), and each write costs the worker a task and a store write (docs/design.md#live-deltas)."""
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
        self._writing = _keep(self._loop.create_task(self._publish(final=False)))
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
        )
        return delta, latest, latest_parts

    def _sent_now(self, delta: Delta, latest: Message, latest_parts: Parts) -> None:
        self.published = delta.seq
        self._sent, self._sent_parts = latest, latest_parts

    def _lost(self) -> None:
        self._failed = True
        logger.warning("live deltas of %s stopped", self.key.name(), exc_info=True)

    def _publish_now(self, *, final: bool) -> None:
        assert self._now is not None
        step = self._next(final)
        if step is None:
            return
        try:
            self._now(self.key, step[0])
        except Exception:
            self._lost()
            return
        self._sent_now(*step)

    async def _publish(self, *, final: bool) -> None:
        step = self._next(final)
        if step is None:
            return
        try:
            await self.channel.publish(self.key, step[0])
        except Exception:
            self._lost()
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

CANCEL_CHECK_EVERY = 0.5
"""Seconds between two checks of the cancel notes of the runs with calls in flight: a call
stops well within a second of its run's cancellation, at two wake-ups a second per worker."""
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
    watch: CancelWatch
    fired: bool = False

    def tick(self) -> None:
        """The call woke up anyway (a model's delta): check the notes now if a check is due."""
        self.watch.tick()


class CancelWatch:
    """The cancel notes of the runs whose calls are in flight on this worker (module doc).

    A check is due every ``every`` seconds. Calls that wake up anyway (a streaming model, for
    each delta) run the due checks (:meth:`Watched.tick`); a timer half an interval later runs
    one no call ran (a model thinking, a tool busy), so watching costs no wake-up of its own
    while a reply streams."""

    def __init__(self, channel: DeltaChannel, *, every: float = CANCEL_CHECK_EVERY) -> None:
        self.channel = channel
        self.every = every
        self._held_now = channel.held_now if isinstance(channel, ImmediateChannel) else None
        self._watched: list[Watched] = []
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._checking: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watching(self, session_id: str, run_id: str) -> Iterator[Watched]:
        """Cancel the current task if run ``run_id``'s cancel note appears while in the block
        (``fired`` then tells that cancellation from Temporal's own)."""
        task = asyncio.current_task()
        assert task is not None
        watched = Watched(cancel_note(session_id, run_id)[0], task, self)
        if not self._watched:
            self._last = task.get_loop().time()
        self._watched.append(watched)
        if self._timer is None and self._checking is None:
            self._arm()
        try:
            yield watched
        finally:
            self._watched.remove(watched)
            if not self._watched and self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def tick(self) -> None:
        loop = asyncio.get_running_loop()
        if self._watched and self._checking is None and loop.time() - self._last >= self.every:
            self._check_now()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(self._last + 1.5 * self.every, self._overdue)

    def _overdue(self) -> None:
        self._timer = None
        if self._watched and self._checking is None:
            self._check_now()

    def _check_now(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if self._held_now is not None:
            # a stat or a dict look-up: done here, not in a task of its own
            try:
                self._cancel(self._held_now(list({w.key for w in self._watched})))
            except Exception as exc:  # best effort: Temporal's cancellation still arrives
                logger.debug("reading cancel notes: %s", exc)
            if self._watched:
                self._arm()
            return
        self._checking = _keep(loop.create_task(self._check()))
        self._checking.add_done_callback(self._checked)

    def _checked(self, _: asyncio.Task[None]) -> None:
        self._checking = None
        if self._watched:
            self._arm()

    async def _check(self) -> None:
        keys = list({w.key for w in self._watched})
        try:
            noted = await self._noted(keys)
        except Exception as exc:  # best effort: Temporal's cancellation still arrives
            logger.debug("reading cancel notes: %s", exc)
            return
        self._cancel(noted)

    def _cancel(self, noted: set[DeltaKey]) -> None:
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
