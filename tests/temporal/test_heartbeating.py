"""The background heartbeat of model, tool and store calls (``activities.base.heartbeating``):
it beats while the body runs and never after the body is done, whichever way the body ends.

Its exit does not wait for the beat task to wind down (that cost a loop iteration on every
call's critical path): these tests pin down that nothing is sent after the exit all the same.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

from durable_agent.activities import base
from durable_agent.activities.base import heartbeating

BEAT = 0.01


@pytest.fixture(autouse=True)
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "HEARTBEAT_EVERY", BEAT)


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


def _recording() -> tuple[ActivityEnvironment, Beats]:
    env = ActivityEnvironment()
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


async def test_a_quick_body_within_the_grace_sends_no_beat() -> None:
    env, beats = _recording()
    marks: list[int] = []

    async def body() -> None:
        async with heartbeating(grace=60.0):
            await asyncio.sleep(0)
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
