"""TemporalExecutor: the client side of durable runs.

``new(..., executor=TemporalExecutor(client, task_queue=...))`` returns the usual handle. The handle
still uses the store directly for ``new``, ``append``, ``branch`` and ``fork``; runs and
compactions are workflows on the worker, and lifecycle events go through a publish workflow. The
run stream polls the workflow's ``events(after)`` query (queries add no history) and applies each
receipt to the handle as it arrives, read or not.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)
from temporalio.service import RPCError, RPCStatusCode

from ..activities.failures import agent_error, unsettled_ids
from ..ai.messages import Message
from ..durable.errors import (
    AgentError,
    CompactError,
    EventGapError,
    RunCancelledError,
)
from ..durable.events import Event
from ..durable.limits import PAYLOAD_LIMIT, check_payload
from ..durable.live import DeltaFollower, LiveDeltas, live_channel
from ..durable.reconcile import reconcile
from ..durable.state import AgentConfig, SessionState
from ..durable.stream import LocalRunStream, RunStream
from ..session.codec import decode_entry
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.ids import new_id
from .activity_calls import KIND_KEY, SESSION_ID_KEY
from .event_bodies import hydrate
from .run_timeout import run_timeout_from_env
from .stream_recovery import read_bodies, resync
from .types import (
    CompactInput,
    EventsAnswer,
    InputEntry,
    PublishInput,
    RunInput,
    RunResult,
    RunState,
    Timeouts,
    event_to_wire,
)
from .unsettled import scheduled_entry_ids

__all__ = ["TemporalExecutor", "compact_workflow_id", "publish_workflow_id", "run_workflow_id"]

logger = logging.getLogger("durable_agent.temporal")

DEFAULT_PAYLOAD_LIMIT = PAYLOAD_LIMIT
LIVE_QUERY_EVERY = 0.25
"""Longest gap between two ``events`` queries while a reply streams (its deltas are read every
20 ms meanwhile), so its ``message_end`` receipt follows the last delta quickly."""


def run_workflow_id(session_id: str, run_id: str) -> str:
    return f"durable-agent/{session_id}/run/{run_id}"


def compact_workflow_id(session_id: str, op_id: str) -> str:
    return f"durable-agent/{session_id}/compact/{op_id}"


def publish_workflow_id(key: str) -> str:
    return f"durable-agent/publish/{key}"


def _search(session_id: str, kind: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [SearchAttributePair(SESSION_ID_KEY, session_id), SearchAttributePair(KIND_KEY, kind)]
    )


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


TRANSIENT = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
    }
)
"""RPC failures worth waiting out (a restarting server) rather than failing the stream."""


def _tail_answer(result_task: asyncio.Future[RunResult], after: int) -> EventsAnswer | None:
    """The events past ``after`` from a finished run's result (:attr:`RunResult.tail`), or
    ``None`` when the result does not hold them all (a run that failed or was cancelled, an
    older worker's result, a client that fell further behind than the tail reaches): then the
    ``events`` query answers, at the cost of a replay of the closed workflow."""
    if result_task.cancelled() or result_task.exception() is not None:
        return None
    tail = result_task.result().tail
    if not tail or tail[0].position > after + 1:
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


class TemporalExecutor:
    """Runs every run as a Temporal workflow on ``task_queue``.

    ``execution_timeout`` bounds each run and compaction workflow: by default
    ``DURABLE_AGENT_RUN_TIMEOUT`` from the environment, else 24 hours; ``None`` for none.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        execution_timeout: timedelta | Literal["default"] | None = "default",
        continue_as_new_after_turns: int | None = None,
        timeouts: Timeouts | None = None,
        poll_initial: float = 0.05,
        poll_max: float = 1.0,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        live_deltas: LiveDeltas = "auto",
    ) -> None:
        self.client = client
        self.live_deltas = live_deltas
        """Where run streams read live ``message_update`` deltas: by default the channel of the
        handle's store (the worker publishes on the same one), ``None`` for whole messages."""
        self.task_queue = task_queue
        # "default": DURABLE_AGENT_RUN_TIMEOUT or 24 hours (see run_timeout.py)
        self.execution_timeout = (
            run_timeout_from_env() if isinstance(execution_timeout, str) else execution_timeout
        )
        self.continue_as_new_after_turns = continue_as_new_after_turns
        self.timeouts = timeouts or Timeouts()
        self.poll_initial = poll_initial
        self.poll_max = poll_max
        self.payload_limit = payload_limit

    # -- Executor ----------------------------------------------------------------------------

    def check_options(self, factory: Any, options: dict[str, Any], publisher: Any) -> None:
        if not isinstance(factory, str) or not factory:
            raise TypeError(
                "with the Temporal executor, factory is the name of an agent registered on the "
                "worker"
            )
        if publisher is not None:
            raise ValueError("with the Temporal executor the worker owns the publisher")
        try:
            json.dumps(options)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"agent options must be plain JSON data: {exc}") from exc

    async def start_run(
        self, state: SessionState, config: AgentConfig, entries: list[Entry], run_id: str | None
    ) -> RunStream:
        run_id = run_id or new_id()
        inputs = [InputEntry.of(e, i) for i, e in enumerate(entries)]
        for item in inputs:
            check_payload(item.wire, "input entry", self.payload_limit)
        assert isinstance(config.factory, str)
        # a terminated or failed run's write may have landed after it ended (a tool activity
        # that finished after the termination, an append that timed out and then applied):
        # adopt it first, so the workflow's repair answers only truly unanswered calls (11.8b)
        await reconcile(state)
        inp = RunInput(
            session_id=state.session_id,
            run_id=run_id,
            agent=config.factory,
            leaf_id=state.leaf,
            inputs=inputs,
            options=dict(config.raw_options),
            continue_as_new_after_turns=self.continue_as_new_after_turns,
            timeouts=self.timeouts,
        )
        wid = run_workflow_id(state.session_id, run_id)
        try:
            handle: WorkflowHandle[Any, RunResult] = await self.client.start_workflow(
                "durable_agent.run",
                inp,
                id=wid,
                task_queue=self.task_queue,
                result_type=RunResult,
                execution_timeout=self.execution_timeout,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=_search(state.session_id, "run"),
                static_summary=f"agent {config.factory!r} run on session {state.session_id!r}",
            )
        except WorkflowAlreadyStartedError:
            handle = self.client.get_workflow_handle(wid, result_type=RunResult)

        async def request_cancel() -> None:
            await handle.cancel()

        channel = live_channel(self.live_deltas, state.store)
        follower = None if channel is None else DeltaFollower(channel, state.session_id, run_id)
        return LocalRunStream(self._pump(state, handle, follower), on_cancel=request_cancel)

    def _pump(
        self,
        state: SessionState,
        handle: WorkflowHandle[Any, RunResult],
        follower: DeltaFollower | None = None,
    ) -> Callable[[Callable[[Event], None]], Any]:
        async def produce(put: Callable[[Event], None]) -> list[Message]:
            result_task = asyncio.ensure_future(_result(handle))
            produced: list[Message] = []
            try:
                try:
                    await self._follow(state, handle, result_task, put, produced, follower)
                except Exception:
                    # The stream broke (a gap, a failed query or store read) while the run may
                    # go on: the handle stays busy until the run ends, then takes its log and
                    # leaf from the store, so no second run branches from a stale leaf.
                    try:
                        await resync(state, handle, result_task)
                    except Exception:
                        logger.exception("could not re-sync %s after its stream broke", handle.id)
                    raise
                try:
                    await result_task
                except WorkflowFailureError as exc:
                    # writes the run scheduled may land after it ended: the next run start
                    # reconciles them with the store (issue 11.8b)
                    ids = await scheduled_entry_ids(self.client, handle.id)
                    ids += unsettled_ids(exc.cause)  # local appends: named by the failure
                    state.unsettled.extend(i for i in ids if i not in state.index)
                    raise client_error(exc) from exc
                return produced
            finally:
                if not result_task.done():
                    result_task.cancel()

        return produce

    async def _follow(
        self,
        state: SessionState,
        handle: WorkflowHandle[Any, RunResult],
        result_task: asyncio.Future[RunResult],
        put: Callable[[Event], None],
        produced: list[Message],
        follower: DeltaFollower | None,
    ) -> None:
        """Poll ``events(after)`` until ``agent_end`` or the run's end, applying each receipt
        and putting each event (bodies the answer left out read back from the store); while a
        reply streams, ``follower`` puts its live deltas (read from the store's delta channel)
        before the reply's ``message_end``."""
        after, delay = 0, self.poll_initial
        # A run's first events are visible only once its first workflow task completes, and a
        # query that arrives during that task makes the worker cut it short to answer: wait a
        # first interval (or for the end, whose result carries the last events) before asking.
        await asyncio.wait({result_task}, timeout=delay)
        while True:
            closed = result_task.done()
            answer = _tail_answer(result_task, after) if closed else None
            if answer is None:
                answer = await self._query_events(handle, after, result_task)
            if answer is not None and answer.events:
                if answer.events[0].position > after + 1:
                    raise EventGapError(
                        f"events {after + 1}..{answer.events[0].position - 1} of "
                        f"{handle.id} are no longer retained"
                    )
                bodies = await read_bodies(state, answer.events)
                ended = False
                for wire in answer.events:
                    event = hydrate(wire, bodies)
                    if follower is not None:  # live deltas go before their message_end
                        for update in await follower.see(event, wire.position):
                            put(update)
                    if event.entries is not None and event.leaf_id is not None:
                        state.apply_receipt(event.entries, event.leaf_id)
                    inner = event.agent
                    if (
                        inner is not None
                        and inner.type == "message_end"
                        and event.entries
                        and inner.message is not None
                    ):
                        stored = event.entries[0]  # the stored form of the message
                        message = (
                            stored.message if isinstance(stored, MessageEntry) else inner.message
                        )
                        produced.append(message)
                    if inner and inner.type == "agent_end":
                        # the workflow sends the run's usage, not its transcript
                        inner = inner.model_copy(update={"messages": list(produced)})
                        event = event.model_copy(update={"agent": inner})
                    put(event)
                    after = wire.position
                    ended = ended or (inner is not None and inner.type == "agent_end")
                if ended:
                    return  # agent_end is the last event: only the result remains
                delay = self.poll_initial
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

    async def _query_events(
        self, handle: WorkflowHandle[Any, RunResult], after: int, result_task: asyncio.Future[Any]
    ) -> EventsAnswer | None:
        """One ``events(after)`` query; ``None`` while the workflow cannot answer yet."""
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

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None:
        assert isinstance(config.factory, str)
        op_id = new_id()
        try:
            wire: str | None = await self.client.execute_workflow(
                "durable_agent.compact",
                CompactInput(
                    session_id=state.session_id,
                    op_id=op_id,
                    agent=config.factory,
                    leaf_id=state.leaf,
                    keep_turns=keep_turns,
                    prompt=prompt,
                    options=dict(config.raw_options),
                    timeouts=self.timeouts,
                ),
                id=compact_workflow_id(state.session_id, op_id),
                task_queue=self.task_queue,
                result_type=str | None,  # type: ignore[arg-type]
                execution_timeout=self.execution_timeout,
                search_attributes=_search(state.session_id, "compact"),
                static_summary=f"compact session {state.session_id!r}",
            )
        except WorkflowFailureError as exc:
            error = client_error(exc)
            if isinstance(error, AgentError) and not isinstance(error, CompactError):
                raise CompactError(str(error)) from exc
            raise error from exc
        if wire is None:
            return None
        entry = decode_entry(wire)
        assert isinstance(entry, CompactionEntry)
        state.apply_receipt([entry], entry.id)
        return entry

    async def publish(self, config: AgentConfig, events: list[Event]) -> None:
        if not events:
            return
        key = events[0].idempotency_key or new_id()
        try:
            await self.client.start_workflow(
                "durable_agent.publish",
                PublishInput(events=[event_to_wire(e) for e in events], timeouts=self.timeouts),
                id=publish_workflow_id(key),
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=_search(events[0].session_id, "publish"),
                static_summary=", ".join(e.type for e in events),
            )
        except WorkflowAlreadyStartedError:
            pass
        except RPCError:
            logger.exception("could not start the publish workflow for %s", key)

    # -- operator helpers --------------------------------------------------------------------

    async def state(self, session_id: str, run_id: str) -> RunState:
        """The live ``state()`` of one run."""
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        result: RunState = await handle.query("state", result_type=RunState)
        return result
