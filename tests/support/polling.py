"""The one way tests wait for something another process or task does: poll a probe to a deadline.

A poll interval is not a synchronisation sleep: the probe decides, the interval only bounds how
often it is asked. ``wait_until`` is for blocking code (subprocess tests), ``eventually`` for
coroutines (Temporal tests); both fail with what they waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["eventually", "poll", "wait_until"]

T = TypeVar("T")


def poll(probe: Callable[[], T | None], *, within: float, interval: float = 0.05) -> T | None:
    """``probe()``'s first truthy value, polled every ``interval`` for up to ``within`` seconds;
    its last (falsy) answer once the time is up."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def wait_until(
    probe: Callable[[], T | None],
    *,
    within: float,
    what: str,
    interval: float = 0.05,
) -> T:
    """Like :func:`poll`, failing the test with ``what`` once the time is up."""
    value = poll(probe, within=within, interval=interval)
    if not value:
        raise AssertionError(f"timed out after {within}s waiting for {what}")
    return value


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    within: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Await ``probe()`` until it returns something truthy, within ``within`` seconds; a probe
    that raises (a query before the first workflow task, a lagging list...) is asked again."""
    deadline = time.monotonic() + within
    last_error: BaseException | None = None
    while True:
        try:
            value = await probe()
            if value:
                return value
        except Exception as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}") from last_error
        await asyncio.sleep(interval)
