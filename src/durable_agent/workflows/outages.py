"""Waiting out Temporal being out of reach, for the calls that follow a run to its end: the run
goes on in Temporal meanwhile (its workers reach it), so its follower must not give up on it,
nor take the outage for the run's end (docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.service import RPCError, RPCStatusCode

from .worker_logs import in_one_line

__all__ = ["OUTAGE", "RETRY_CAP", "through_outages"]

_T = TypeVar("_T")

OUTAGE = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.UNKNOWN,  # a connection broken under a long poll
    }
)
"""RPC failures of a Temporal that is restarting, overloaded or cut off: waited out."""
RETRY_CAP = 5.0
"""Seconds between two attempts at most while Temporal is out of reach."""


async def through_outages(
    call: Callable[[], Awaitable[_T]], what: str, logger: logging.Logger
) -> _T:
    """``call()``'s answer, asked again (0.5 s after, doubling up to :data:`RETRY_CAP`) while
    Temporal is out of reach, however long: one WARNING line when an outage begins, one INFO
    line when Temporal answers again, none per attempt (an outage is an ordinary event, not a
    bug). ``what``: what is waited for, as the lines say it."""
    delay, down = 0.5, False
    while True:
        try:
            answer = await call()
        except RPCError as exc:
            if exc.status not in OUTAGE:
                raise
            if not down:
                logger.warning("%s: Temporal out of reach, waiting (%s)", what, in_one_line(exc))
                down = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP)
            continue
        if down:
            logger.info("%s: Temporal answers again", what)
        return answer
