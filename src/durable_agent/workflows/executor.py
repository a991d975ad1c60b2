"""TemporalExecutor: the client side of durable runs.

``new(..., executor=TemporalExecutor(client, task_queue=...))`` returns the usual handle. The handle
still uses the store directly for ``new``, ``append``, ``branch`` and ``fork``; runs and
compactions are workflows on the worker, and lifecycle events go through a publish workflow when
a worker on the queue has a publisher. The run stream follows the run's entries in the store
(:mod:`.run_stream`) and applies each receipt to the handle as it arrives, read or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import replace
from datetime import timedelta
from typing import Any, Literal

from temporalio.api.common.v1 import Payloads
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from ..activities.contracts import PublishInput, Timeouts, event_to_wire
from ..activities.run_contracts import CompactInput, InputEntry, RunInput, RunResult, RunState
from ..ai.messages import TextContent
from ..durable.errors import AgentError, CompactError, PayloadTooLargeError
from ..durable.events import Event
from ..durable.inbox import When
from ..durable.limits import PAYLOAD_LIMIT, TEMPORAL_BLOB_LIMIT, check_entry
from ..durable.live import LiveDeltas, live_channel
from ..durable.reconcile import reconcile
from ..durable.state import AgentConfig, SessionState
from ..durable.stream import LocalRunStream, RunStream
from ..session.approvals import ApprovalDecision
from ..session.codec import decode_entry, encode_entry
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.errors import SessionNotFoundError, StoreUnavailableError
from ..session.ids import new_id
from ..session.render import short
from ..session.store import Store, created_at_of
from ..session.turns import is_turn_start
from .mail_client import decide_update, send_update, worker_within
from .run_mail import SendBody
from .run_start import RunStart, attached, started_here
from .run_stream import RunFollower, client_error
from .run_timeout import run_timeout_from_env
from .search import run_memo, search_attributes
from .store_check import PublisherCheck, StoreCheck
from .worker_logs import in_one_line

__all__ = [
    "DEFAULT_PAYLOAD_LIMIT",
    "TemporalExecutor",
    "compact_workflow_id",
    "publish_workflow_id",
    "run_input_item",
    "run_workflow_id",
]

logger = logging.getLogger("durable_agent.temporal")

DEFAULT_PAYLOAD_LIMIT = PAYLOAD_LIMIT


_NOT_ON_TEMPORAL = {
    "tools": "on Temporal, tools are registered on the worker (`AgentSpec(tools=...)`), not "
    "passed to new(): the client names the agent",
    "hooks": "on Temporal, hooks are not available: a run on a worker has none (they run "
    "in-process only, with a factory)",
}
"""Agent options a Temporal client cannot carry, and what to do instead."""


def run_workflow_id(session_id: str, run_id: str) -> str:
    return f"durable-agent/{session_id}/run/{run_id}"


def _apply_compaction(state: SessionState, wire: str) -> CompactionEntry:
    entry = decode_entry(wire)
    assert isinstance(entry, CompactionEntry)
    state.apply_receipt([entry], entry.id)
    return entry


async def _cancel_compaction(
    state: SessionState, start: asyncio.Future[WorkflowHandle[Any, str | None]]
) -> None:
    """Cancel a compaction workflow whose caller was cancelled and wait for its end, applying
    the entry it stored before the cancellation took (docs/design.md#compaction)."""
    try:
        handle = await start
    except Exception:
        return  # it never started
    with contextlib.suppress(RPCError):  # it ended already
        await handle.cancel()
    try:
        wire = await handle.result()
    except WorkflowFailureError:
        return  # cancelled (or failed) with nothing stored
    if wire is not None:
        _apply_compaction(state, wire)


def compact_workflow_id(session_id: str, op_id: str) -> str:
    return f"durable-agent/{session_id}/compact/{op_id}"


def publish_workflow_id(key: str) -> str:
    return f"durable-agent/publish/{key}"


def run_input_item(entry: Entry) -> InputEntry:
    """``entry`` as a run input: a message as the plain message (what an operator reads in the
    Temporal UI), any other entry in its stored encoding; either under a fresh ID chosen here,
    which the run keeps, so this client tells the run's input in the store
    (docs/design.md#receipts)."""
    fresh = new_id()
    if isinstance(entry, MessageEntry):
        message, ephemeral, meta = entry.message, entry.ephemeral, entry.meta
        return InputEntry(id=fresh, message=message, ephemeral=ephemeral, meta=meta)
    return InputEntry(wire=encode_entry(entry.model_copy(update={"id": fresh})))


def send_body(entry: MessageEntry, when: When) -> SendBody:
    """A message for the ``send`` update: plain text when it is one, else a run input."""
    message = entry.message
    plain = message.role == "user" and not entry.meta and len(message.content) == 1
    if plain and isinstance(message.content[0], TextContent):
        return SendBody(text=message.content[0].text, when=when)
    return SendBody(inputs=[run_input_item(entry)], when=when)


async def _send(handle: WorkflowHandle[Any, RunResult], entry: MessageEntry, when: When) -> Entry:
    return await send_update(handle, send_body(entry, when))


SUMMARY_WORDS = 60
"""Characters of the question a run's summary shows."""


def run_summary(agent: str, entries: list[Entry]) -> str:
    """The run's summary in the Temporal UI's list: the agent and the first words of the
    question (the last user message of the input), so runs of one session tell apart."""
    starts = [e for e in entries if is_turn_start(e) and isinstance(e, MessageEntry)]
    question = starts[-1].message.text() if starts else ""
    if not question:
        return f"{agent}: (no question)"
    return f"{agent}: {short(question, SUMMARY_WORDS)}"


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
        self.payload_limit = payload_limit
        self.publishers = PublisherCheck(client, task_queue)
        self.stores = StoreCheck(client, task_queue)
        """Refuses a run or compaction while the queue's workers use another store."""
        self.update_wait: float | None = None
        """Seconds :meth:`decide_live` waits for a worker to take a decision, then
        ``TemporalUnavailableError`` (the HTTP server's bound); ``None``: as long as it takes."""

    # -- Executor ----------------------------------------------------------------------------

    def check_options(self, factory: Any, options: dict[str, Any], publisher: Any) -> None:
        if not isinstance(factory, str) or not factory:
            raise TypeError(
                "with the Temporal executor, factory is the name of an agent registered on the "
                "worker"
            )
        if publisher is not None:
            raise ValueError("with the Temporal executor the worker owns the publisher")
        for name, problem in _NOT_ON_TEMPORAL.items():
            if options.get(name):
                raise TypeError(problem)
        try:
            json.dumps(options)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"agent options must be plain JSON data: {exc}") from exc

    async def open(self, store: Store, session_id: str) -> tuple[list[Entry], bool]:
        """The session's entries; an unknown session is left to the first run (which checks
        the agent before creating it) or the handle's first write."""
        try:
            return await store.load_entries(session_id), True
        except SessionNotFoundError:
            return [], False

    async def start_run(
        self,
        state: SessionState,
        config: AgentConfig,
        entries: list[Entry],
        run_id: str | None,
        if_unchanged: bool = False,
    ) -> RunStream:
        await self.stores.check(state.store)  # before anything is created
        run_id = run_id or new_id()
        for entry in entries:
            check_entry(entry, "input entry", self.payload_limit)
        inputs = [run_input_item(e) for e in entries]
        assert isinstance(config.factory, str)
        # a terminated or failed run's write may have landed after it ended (a tool activity
        # that finished after the termination, an append that timed out and then applied):
        # adopt it first, so the workflow's repair answers only truly unanswered calls
        await reconcile(state)
        inp = RunInput(
            session_id=state.session_id,
            run_id=run_id,
            agent=config.factory,
            leaf_id=state.leaf,
            create_session=not state.created,
            inputs=inputs,
            options=dict(config.raw_options),
            continue_as_new_after_turns=self.continue_as_new_after_turns,
            timeouts=self.timeouts,
            if_last=(state.known_last() or "") if if_unchanged else None,
        )
        await self._check_carried(inp)
        summary = run_summary(config.factory, entries)
        handle, start = await self._start_or_attach(state, inp, summary)

        async def request_cancel() -> None:
            await handle.cancel()

        channel = live_channel(self.live_deltas, state.store)
        stream: LocalRunStream | None = None

        def reading() -> bool:
            return stream is not None and stream.events_taken and stream.live_wanted()

        state.live_run_id = run_id
        follower = RunFollower(self.client, state, handle, start, channel, run_id, reading)

        async def sender(entry: MessageEntry, when: When) -> Entry:
            check_entry(entry, "message", self.payload_limit)  # this client's, as for inputs
            return await send_update(handle, send_body(entry, when))

        stream = LocalRunStream(
            follower.produce, on_cancel=request_cancel, run_id=run_id, sender=sender
        )
        stream.when_done(lambda: setattr(state, "live_run_id", ""))
        return stream

    async def _check_carried(self, inp: RunInput) -> None:
        """Refuse a run whose start Temporal would refuse: its inputs travel in one payload,
        so inputs each under the payload limit may together be over Temporal's, as may one whose
        stored form is escaped once more in it (a note of quotes). Typed and before anything is
        created, not an ``RPCError`` a retry never gets past (docs/design.md#bounded-history)."""
        size = Payloads(payloads=await self.client.data_converter.encode([inp])).ByteSize()
        if size > TEMPORAL_BLOB_LIMIT:
            raise PayloadTooLargeError(
                f"the run's input is {size} bytes as its workflow's start carries it, over "
                f"Temporal's {TEMPORAL_BLOB_LIMIT}-byte limit: send it in several runs"
            )

    async def _start_or_attach(
        self, state: SessionState, inp: RunInput, summary: str
    ) -> tuple[WorkflowHandle[Any, RunResult], RunStart]:
        """Start the run's workflow, or follow the run of that ID that exists already from where
        it started (its input is its own)."""
        wid = run_workflow_id(state.session_id, inp.run_id)
        # the creation of the session ID the run belongs to, for the busy checks: a run the
        # session's delete left going is no run of the session created again under the ID
        born = await created_at_of(state.store, state.session_id) if state.created else None
        state.born = born
        try:
            handle: WorkflowHandle[Any, RunResult] = await self.client.start_workflow(
                "durable_agent.run",
                inp,
                id=wid,
                task_queue=self.task_queue,
                result_type=RunResult,
                execution_timeout=self.execution_timeout,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=search_attributes(state.session_id, "run"),
                memo=run_memo(born),
                static_summary=summary,
            )
        except WorkflowAlreadyStartedError:
            handle = self.client.get_workflow_handle(wid, result_type=RunResult)
            start = await attached(self.client, handle, state)
        else:
            start = started_here(state, inp.inputs)
        return handle, replace(start, born=born)  # its follower need not read the record

    async def decide_live(self, state: SessionState, decision: ApprovalDecision) -> Entry | None:
        """Hand a decision to the run that asked for it (its ``decide`` update); ``None`` when
        that run does not wait for it (docs/design.md#approvals-and-steering)."""

        def run_handle(run_id: str) -> WorkflowHandle[Any, Any]:
            return self.client.get_workflow_handle(run_workflow_id(state.session_id, run_id))

        async with worker_within(self.update_wait, "decision"):
            return await decide_update(run_handle, state, decision)

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None:
        assert isinstance(config.factory, str)
        if not state.created:
            return None  # nothing stored, so nothing to summarize
        await self.stores.check(state.store)
        op_id = new_id()
        start = asyncio.ensure_future(
            self.client.start_workflow(
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
                search_attributes=search_attributes(state.session_id, "compact"),
                static_summary=f"compact session {state.session_id!r}",
            )
        )
        try:
            wire = await (await asyncio.shield(start)).result()
        except asyncio.CancelledError:
            # the workflow would go on and store an entry this handle never sees: cancel it and
            # wait for its end, so the handle holds what the store holds (a commit in flight
            # completes, as in process)
            await asyncio.shield(_cancel_compaction(state, start))
            raise
        except WorkflowFailureError as exc:
            error = client_error(exc)
            if isinstance(error.__cause__, StoreUnavailableError):
                raise error.__cause__ from exc  # its write failed: as in process
            if isinstance(error, AgentError) and not isinstance(error, CompactError):
                raise CompactError(str(error)) from exc
            raise error from exc
        return None if wire is None else _apply_compaction(state, wire)

    async def publish(self, config: AgentConfig, events: list[Event]) -> None:
        if not events or not await self.publishers.any():
            return  # no worker on the queue has a publisher: it would drop them
        key = events[0].idempotency_key or new_id()
        try:
            await self.client.start_workflow(
                "durable_agent.publish",
                PublishInput(events=[event_to_wire(e) for e in events], timeouts=self.timeouts),
                id=publish_workflow_id(key),
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=search_attributes(events[0].session_id, "publish"),
                static_summary=", ".join(e.type for e in events),
            )
        except WorkflowAlreadyStartedError:
            pass
        except RPCError as exc:  # an outage, not a bug: one line, as the server logs a 503
            logger.warning("could not start the publish workflow for %s: %s", key, in_one_line(exc))

    # -- operator helpers --------------------------------------------------------------------

    async def state(self, session_id: str, run_id: str) -> RunState:
        """The live ``state()`` of one run."""
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        result: RunState = await handle.query("state", result_type=RunState)
        return result
