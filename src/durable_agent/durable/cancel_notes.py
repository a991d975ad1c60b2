"""Cancel notes: how a streaming call learns of its run's cancellation without heartbeats.

A cancelled run writes a note under its run's turn-0 key
(:func:`~durable_agent.session.deltas.cancel_note`; the run workflow does it on its cancel path,
whoever cancelled it). :class:`CancelWatch` checks, in one read per check where the channel can
(``held``; inline on a channel that never waits), the notes of the runs whose calls are in
flight on this worker twice a second, and cancels a call's task when its run's note appears: a
streaming model call stops within a fraction of a second, without a heartbeat per fraction of a
second (docs/design.md#cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..session.deltas import DeltaChannel, DeltaKey, ImmediateChannel, cancel_note
from .live import clear_later, keep

__all__ = ["CANCEL_CHECK_EVERY", "CancelWatch", "Watched", "write_cancel_note"]

logger = logging.getLogger("durable_agent.live")

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
        self._checking = keep(loop.create_task(self._check()))
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
