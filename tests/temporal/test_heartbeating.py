"""The background heartbeat of model, tool and store calls (``activities.base.heartbeating``):
the first beat half a heartbeat timeout in, the next ones 0.8 timeouts apart, so a call shorter
than half the timeout sends none (a heartbeat that reaches the server is a billed action); none
without a heartbeat timeout; never after the body is done, whichever way the body ends.

Its exit does not wait for the beat task to wind down (that cost a loop iteration on every
call's critical path): these tests pin down that nothing is sent after the exit all the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from durable_agent.activities.base import FIRST_BEAT, NEXT_BEAT, heartbeating

TIMEOUT = 0.05
BEAT = TIMEOUT * NEXT_BEAT


class Beats(list[str]):
    """The heartbeats an ActivityEnvironment received; :meth:`reach` waits for the n-th."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = asyncio.Event()

    def record(self, *details: object) -> None:
        self.append("beat")
        self.seen.set()

    async def reach(self, n: int) -> None:
        while len(self) < n:
            self.seen.clear()
            await self.seen.wait()


def _recording(timeout: float | None = TIMEOUT) -> tuple[ActivityEnvironment, Beats]:
    env = ActivityEnvironment()
    heartbeat_timeout = None if timeout is None else timedelta(seconds=timeout)
    env.info = dataclasses.replace(env.info, heartbeat_timeout=heartbeat_timeout)
    beats = Beats()
    env.on_heartbeat = beats.record
    return env, beats


async def _after_exit(beats: Beats, marks: list[int]) -> None:
    """Mark how many beats were sent at the exit, then let the loop run well past several
    beat intervals (an observation window: a beat task left running would send more)."""
    marks.append(len(beats))
    for _ in range(5):
        await asyncio.sleep(BEAT)


async def test_beats_while_the_body_runs_and_not_after_it_returns() -> None:
    env, beats = _recording()
    marks: list[int] = []

    async def body() -> None:
        async with heartbeating():
            await beats.reach(3)
        await _after_exit(beats, marks)

    await env.run(body)
    assert marks[0] >= 3
    assert len(beats) == marks[0]


async def test_the_first_beat_comes_half_a_timeout_in_and_the_next_ones_later() -> None:
    env, beats = _recording()
    times: list[float] = []

    async def body() -> None:
        started = time.monotonic()
        async with heartbeating():
            for n in (1, 2, 3):
                await beats.reach(n)
                times.append(time.monotonic() - started)

    await env.run(body)
    # asyncio's timers may fire a clock tick early; a loaded machine makes them late
    assert times[0] >= TIMEOUT * FIRST_BEAT * 0.9
    for earlier, later in itertools.pairwise(times):
        assert later - earlier >= BEAT * 0.9


@pytest.mark.parametrize("heartbeat", [60.0, None], ids=["shorter-than-half", "no-timeout"])
async def test_a_body_shorter_than_half_the_timeout_or_without_one_sends_no_beat(
    heartbeat: float | None,
) -> None:
    env, beats = _recording(heartbeat)
    marks: list[int] = []

    async def body() -> None:
        async with heartbeating():
            await asyncio.sleep(TIMEOUT * 2)
        await _after_exit(beats, marks)

    await env.run(body)
    assert beats == []


async def test_no_beat_after_the_body_raises() -> None:
    env, beats = _recording()
    marks: list[int] = []

    async def body() -> None:
        try:
            async with heartbeating():
                await beats.reach(1)
                raise LookupError("the body failed")
        except LookupError:
            await _after_exit(beats, marks)
            raise

    with pytest.raises(LookupError):
        await env.run(body)
    assert len(beats) == marks[0] >= 1


async def test_a_cancelled_body_is_cancelled_and_beats_stop() -> None:
    env, beats = _recording()
    marks: list[int] = []
    entered = asyncio.Event()

    async def body() -> None:
        try:
            async with heartbeating():
                entered.set()
                await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            await _after_exit(beats, marks)
            raise

    task = asyncio.ensure_future(env.run(body))
    await entered.wait()
    await beats.reach(1)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(beats) == marks[0]
