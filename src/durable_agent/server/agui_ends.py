"""The ends of an AG-UI stream that come before its run's: the server stopping, a client too
slow for its run, the session's store or the server's follower failing. AG-UI wants every
stream to end in ``RUN_FINISHED`` or ``RUN_ERROR``, and a client takes one that just stops for
a broken run with no explanation: each ends in a ``RUN_ERROR`` whose ``code`` names the case
and whose message says what became of the run and what to do (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio

import anyio
from ag_ui.core import RunErrorEvent

from .frames import Frame, gone

__all__ = ["GRACE", "ended_early", "on_stop"]

GRACE = 1.0
"""Seconds a stream has, once the server stops, to send its end before it is cut (under the
server's own grace for requests in flight)."""


def ended_early(code: str, run_id: str, *, local: bool) -> RunErrorEvent:
    """The ``RUN_ERROR`` of a stream its hub let go for ``code`` (:func:`.frames.gone`), of the
    run ``run_id``; ``local``: the server runs its runs in its own process (a stop ends them;
    on Temporal they go on, on the workers)."""
    follow = f'send this input again with runId "{run_id}" to follow the run to its end'
    if code == "ServerStopping" and local:
        why = (
            "the server is stopping, and the run stops with the server (it runs in the"
            " server's process); what it stored is kept: ask again once the server is back"
        )
    elif code == "ServerStopping":
        why = f"the server is stopping; the run goes on, on its workers: {follow}"
    elif code == "TooSlow":
        why = f"this client read the run's events slower than they came; the run goes on: {follow}"
    elif code == "StoreUnavailableError":
        why = f"the session store is unavailable; in a moment, {follow}"
    else:  # StreamFailed: the server logged why
        why = f"the server failed to follow the run (it logged why); the run goes on: {follow}"
    return RunErrorEvent(message=why, code=code)


def on_stop(stopping: anyio.Event, queue: asyncio.Queue[Frame]) -> asyncio.Task[None]:
    """A task that ends the stream of ``queue`` in ``ServerStopping`` once ``stopping`` is set
    (as the session streams end: sse-starlette sets it when the server stops), after the frames
    before it; cancel it when the stream ends."""

    async def told() -> None:
        await stopping.wait()
        queue.put_nowait(gone("ServerStopping"))

    return asyncio.create_task(told())
