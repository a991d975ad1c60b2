"""The client side of one run on Temporal: the run stream a handle reads.

:class:`RunPoller` polls the run workflow's ``events(after)`` query (queries add no history),
puts the left-out message bodies back from the store, applies each receipt to the handle as it
arrives, read or not, and interleaves the reply's live deltas before its ``message_end``
(docs/design.md#receipts, docs/design.md#live-deltas). A run that ended delivers its last events
from its result's ``tail``. A stream that broke leaves the handle busy until the run ended and
then re-syncs it from the store; a run that failed hands the entries it may have stored to the
handle's next run start (:mod:`.stream_recovery`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TerminatedError,
    TimeoutError,
)
from temporalio.service import RPCError, RPCStatusCode

from ..activities.contracts import EventsAnswer, RunResult, WireEvent
from ..activities.failures import agent_error, unsettled_ids
from ..ai.messages import Message
from ..durable.errors import AgentError, EventGapError, RunCancelledError
from ..durable.events import Event
from ..durable.live import DeltaFollower
from ..durable.state import SessionState
from ..session.entries import MessageEntry
from .event_bodies import hydrate
from .stream_recovery import read_bodies, resync, scheduled_entry_ids

__all__ = ["LIVE_QUERY_EVERY", "RunPoller", "client_error"]

logger = logging.getLogger("durable_agent.temporal")

LIVE_QUERY_EVERY = 0.25
"""Longest gap between two ``events`` queries while a reply streams (its deltas are read every
20 ms meanwhile), so its ``message_end`` receipt follows the last delta quickly."""

TRANSIENT = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
    }
)
"""RPC failures worth waiting out (a restarting server) rather than failing the stream."""


def client_error(exc: BaseException) -> BaseException:
    """A workflow failure as the in-process executor would have raised it."""
    cause = exc.cause if isinstance(exc, WorkflowFailureError) else exc
    if isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause  # a workflow that let an activity failure through: report its cause
    if isinstance(cause, CancelledError):
        return RunCancelledError("run cancelled")
    if isinstance(cause, TerminatedError):
        return AgentError(f"run terminated: {cause.message}")
    if isinstance(cause, TimeoutError):
        return AgentError(f"run timed out: {cause.message}")
    if isinstance(cause, ApplicationError):
        return agent_error(cause)
    return AgentError(str(cause))


def _tail_answer(result_task: asyncio.Future[RunResult], after: int) -> EventsAnswer | None:
    """The events past ``after`` from a finished run's result (:attr:`RunResult.tail`), or
    ``None`` when the result does not hold them all (a run that failed or was cancelled, a
    client that fell further behind than the tail reaches): then the ``events`` query answers,
    at the cost of a replay of the closed workflow."""
    if result_task.cancelled() or result_task.exception() is not None:
        return None
    tail = result_task.result().tail
    if tail[0].position > after + 1:
        return None
    events = [w for w in tail if w.position > after]
    return EventsAnswer(
        events=events, first_position=tail[0].position, last_position=tail[-1].position
    )


async def _result(handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    """The run's result, waiting out server outages longer than the client's own RPC retries
    (the run itself goes on in Temporal; the stream must not give up on it)."""
    delay = 0.5
    while True:
        try:
            return await handle.result()
        except RPCError as exc:
            if exc.status not in TRANSIENT:
                raise
            logger.warning("waiting for the result of %s: %s", handle.id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


class RunPoller:
    """Follows one run workflow for one handle (see the module docstring); :meth:`produce` is
    the producer of the handle's ``LocalRunStream``."""

    def __init__(
        self,
        client: Client,
        state: SessionState,
        handle: WorkflowHandle[Any, RunResult],
        follower: DeltaFollower | None,
        *,
        poll_initial: float,
        poll_max: float,
    ) -> None:
        self.client = client
        self.state = state
        self.handle = handle
        self.follower = follower
        self.poll_initial = poll_initial
        self.poll_max = poll_max
        self.produced: list[Message] = []
        """The messages of the ``message_end`` receipts (what ``wait()`` returns)."""

    async def produce(self, put: Callable[[Event], None]) -> list[Message]:
        state, handle = self.state, self.handle
        result_task = asyncio.ensure_future(_result(handle))
        try:
            try:
                await self._follow(result_task, put)
            except Exception:
                # The stream broke (a gap, a failed query or store read) while the run may go
                # on: the handle stays busy until the run ends, then takes its log and leaf from
                # the store, so no second run branches from a stale leaf.
                try:
                    await resync(state, handle, result_task)
                except Exception:
                    logger.exception("could not re-sync %s after its stream broke", handle.id)
                raise
            try:
                await result_task
            except WorkflowFailureError as exc:
                # writes the run scheduled may land after it ended: the next run start
                # reconciles them with the store (docs/design.md#repair-and-reconcile)
                ids = await scheduled_entry_ids(self.client, handle.id)
                ids += unsettled_ids(exc.cause)  # local appends: named by the failure
                state.unsettled.extend(i for i in ids if i not in state.index)
                raise client_error(exc) from exc
            return self.produced
        finally:
            if not result_task.done():
                result_task.cancel()

    async def _follow(
        self, result_task: asyncio.Future[RunResult], put: Callable[[Event], None]
    ) -> None:
        """Poll ``events(after)`` until ``agent_end`` or the run's end, delivering each event;
        while a reply streams, the follower puts its live deltas (read from the store's delta
        channel) before the reply's ``message_end``."""
        after, delay, follower = 0, self.poll_initial, self.follower
        # A run's first events are visible only once its first workflow task completes, and a
        # query that arrives during that task makes the worker cut it short to answer: wait a
        # first interval (or for the end, whose result carries the last events) before asking.
        await asyncio.wait({result_task}, timeout=delay)
        while True:
            closed = result_task.done()
            answer = _tail_answer(result_task, after) if closed else None
            if answer is None:
                answer = await self._query_events(after, result_task)
            if answer is not None and answer.events:
                if answer.events[0].position > after + 1:
                    raise EventGapError(
                        f"events {after + 1}..{answer.events[0].position - 1} of "
                        f"{self.handle.id} are no longer retained"
                    )
                if await self._deliver(answer.events, put):
                    return  # agent_end is the last event: only the result remains
                after, delay = answer.events[-1].position, self.poll_initial
                if after < answer.last_position:
                    continue  # the answer stopped at its size budget: the rest is ready now
                # caught up: the next events are at least a workflow task away, so wait (for the
                # end too) instead of asking again at once (an empty answer, nearly always: a
                # second query per poll, a workflow activation and server work each)
            if closed:
                return
            if follower is not None and follower.open:
                await follower.follow(put, result_task, min(delay, LIVE_QUERY_EVERY))
            else:
                await asyncio.wait({result_task}, timeout=delay)
            delay = min(delay * 2, self.poll_max)

    async def _deliver(self, wires: list[WireEvent], put: Callable[[Event], None]) -> bool:
        """Apply and put one answer's events, bodies put back; whether ``agent_end`` was one."""
        bodies = await read_bodies(self.state, wires)
        ended = False
        for wire in wires:
            event = hydrate(wire, bodies)
            if self.follower is not None:  # live deltas go before their message_end
                for update in await self.follower.see(event, wire.position):
                    put(update)
            if event.entries is not None and event.leaf_id is not None:
                self.state.apply_receipt(event.entries, event.leaf_id)
            inner = event.agent
            message_end = inner is not None and inner.type == "message_end"
            if message_end and inner is not None and inner.message is not None and event.entries:
                stored = event.entries[0]  # the stored form of the message
                message = stored.message if isinstance(stored, MessageEntry) else inner.message
                self.produced.append(message)
            if inner is not None and inner.type == "agent_end":
                # the workflow sends the run's usage, not its transcript
                inner = inner.model_copy(update={"messages": list(self.produced)})
                event = event.model_copy(update={"agent": inner})
                ended = True
            put(event)
        return ended

    async def _query_events(
        self, after: int, result_task: asyncio.Future[Any]
    ) -> EventsAnswer | None:
        """One ``events(after)`` query; ``None`` while the workflow cannot answer yet."""
        handle = self.handle
        try:
            answer: EventsAnswer = await handle.query("events", after, result_type=EventsAnswer)
            return answer
        except (WorkflowQueryFailedError, WorkflowQueryRejectedError) as exc:
            raise AgentError(f"the events query of {handle.id} failed: {exc}") from exc
        except RPCError as exc:
            if result_task.done() and result_task.exception() is not None:
                logger.debug("events query after failure of %s: %s", handle.id, exc)
                return None
            logger.debug("events query of %s not answered yet: %s", handle.id, exc)
            return None
