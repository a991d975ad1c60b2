"""The run workflow: the shared :class:`RunEngine` with activities as its effects.

The engine and the loop run here unchanged; only the effects differ from in-process: IDs come from
``workflow.random()``, times from ``workflow.now()``, commits are ``append_entries`` activities,
model and tool calls are activities, and events are recorded (after their commit) for the
``events(after)`` query. Queries add no history, so a client polling them costs nothing durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from ..agent.loop import ModelLoop
    from ..agent.options import AgentOptions
    from ..ai.messages import Message, ToolCall, error_tool_result_message
    from ..ai.model import ModelError, ModelEvent, ModelRequest
    from ..ai.timefmt import format_time, parse_time
    from ..ai.tools import RetryPolicy as ToolRetry
    from ..ai.tools import Tool
    from ..durable.engine import RunEngine
    from ..durable.errors import AgentError, PayloadTooLargeError
    from ..durable.events import Event
    from ..durable.limits import PAYLOAD_LIMIT
    from ..durable.persist import Stamped, is_durable
    from ..session.codec import encode_entry
    from ..session.entries import Entry, MessageEntry
    from .activity_calls import (
        SESSION_ID_KEY,
        call_activity,
        ensure_session_attribute,
        store_retry,
    )
    from .event_bodies import (
        QUERY_INLINE_LIMIT,
        BodyTracker,
        carried,
        encoded_size,
        slim,
    )
    from .run_input import NO_INPUT, read_run_input
    from .types import (
        AppendInput,
        AppendResult,
        CallModelInput,
        CallToolInput,
        EnsureSessionInput,
        EventsAnswer,
        LoadPathInput,
        ModelReply,
        PathInfo,
        RunInput,
        RunResult,
        RunState,
        Stamp,
        StoredTimes,
        Timeouts,
        ToolCallRef,
        ToolInfo,
        ToolReply,
        WireEvent,
        event_to_wire,
        with_stored_times,
    )

__all__ = ["RunWorkflow", "SESSION_ID_KEY"]

QUERY_BUDGET = 1_000_000
PRODUCER_COMMIT = "producer-commit-v1"
"""Patch marker: executions started before it append each reply in a second activity."""
TOOL_COMMIT = "tool-commit-v1"
"""Patch marker: executions started before it append every tool result in a second activity."""
BOUNDED_CAN = "bounded-can-v1"
"""Patch marker: executions started before it carry the last turn's events with their bodies."""
CARRIED_TURNS = 2
"""Turns of events continue-as-new carries (since ``bounded-can-v1``), bodies left out."""
CANCEL_WINS = "cancel-wins-v1"
"""Patch marker: before it, a model call that failed after the run's cancel failed the run."""
TOOL_LANDED = "tool-landed-on-cancel-v1"
"""Patch marker: before it, a stamped tool result that arrived during the run's cancellation
got a ``cancelled`` sibling; recorded only in runs cancelled in that window."""
RESET_START_LEAF = "reset-start-leaf-v1"
"""Patch marker: a reset execution of a run started without a leaf retries from the leaf the
original execution resolved (issue 15 item 8); recorded only in reset executions."""
UNRECORDED = frozenset({"message_update", "tool_execution_update"})


def workflow_id_new() -> str:
    return f"{workflow.random().getrandbits(64):016x}"


class _NoArgs(BaseModel):
    pass


async def _remote(**_: Any) -> str:  # pragma: no cover - never called: tools run in activities
    raise RuntimeError("worker tools run in the call_tool activity")


def _descriptor(info: ToolInfo) -> Tool:
    """A stand-in Tool carrying what the loop needs to schedule calls (name, parallelism)."""
    return Tool(
        name=info.name,
        description="",
        args_model=_NoArgs,
        handler=_remote,
        parallel_safe=info.parallel_safe,
        retry=ToolRetry(
            max_attempts=info.max_attempts,
            initial_interval=info.initial_interval,
            backoff=info.backoff,
            max_interval=info.max_interval,
            non_retryable=tuple(info.non_retryable),
        ),
        timeout=info.timeout,
    )


def _cancelled(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.CancelledError, CancelledError)):
        return True
    return isinstance(exc, ActivityError) and isinstance(exc.cause, CancelledError)


def _failure(exc: ActivityError) -> tuple[str, str]:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    if cause is not None:
        return type(cause).__name__, str(cause)
    return type(exc).__name__, str(exc)


@workflow.defn(name="durable_agent.run")
class RunWorkflow:
    """One durable agent run (SPEC §7). ID ``durable-agent/<session_id>/run/<run_id>``."""

    def __init__(self) -> None:
        self._input: RunInput | None = None
        self._engine: RunEngine | None = None
        self._events: list[WireEvent] = []
        self._bodies = BodyTracker()
        """Which stored entry each recorded message body is (see event_bodies)."""
        self._next_position = 1
        self._ephemeral: list[str] = []
        self._turns_this_execution = 0
        self._max_turns: int | None = None
        self._start_leaf: str | None = None
        self._too_large: PayloadTooLargeError | None = None
        """A tool result over the payload limit, raised at the end of its turn."""
        self._cancel_deferred = False
        """A cancellation that arrived during an append, raised once that append is recorded."""
        self._aborted_reply: Message | None = None
        """The partial reply a cancelled ``call_model`` returned, stored by the cancel path."""
        self._tools: _ActivityTools | None = None
        self._committed: dict[str, StoredTimes] = {}
        """Entries their producing activity already stored (ID -> stored times): their commit
        records the receipt without an ``append_entries`` activity (SPEC §7.2)."""

    # -- queries -----------------------------------------------------------------------------

    @workflow.query(name="events")
    def events(self, after: int = 0) -> EventsAnswer:
        """Retained events past position ``after``, in order, about 1 MiB at most (at least one).

        Sizes are the real encoded bytes. An event over ``QUERY_INLINE_LIMIT`` goes without the
        message bodies its stored entries hold (the client reads them from the store), and one
        whose body is not stored yet waits for its receipt (the next poll gets it), so no answer
        nears Temporal's 2 MB limit whatever the message size (issue 16 item 2).

        ``after`` defaults to 0, so an operator can run the query from the UI or CLI with no
        arguments (issue 15 item 5)."""
        out: list[WireEvent] = []
        size = 0
        for i, ev in enumerate(self._events):
            if ev.position <= after:
                continue
            sent = slim(ev, QUERY_INLINE_LIMIT, force=not self._bodies.pending(i))
            if sent is None:
                break
            cost = encoded_size(sent)
            if out and size + cost > QUERY_BUDGET:
                break
            out.append(sent)
            size += cost
        first = self._events[0].position if self._events else self._next_position
        return EventsAnswer(events=out, first_position=first, last_position=self._next_position - 1)

    @workflow.query(name="state")
    def state(self) -> RunState:
        inp, engine = self._input, self._engine
        assert inp is not None
        if engine is None:
            return RunState(
                session_id=inp.session_id,
                run_id=inp.run_id,
                leaf_id=inp.leaf_id or "",
                status="starting",
                turn_count=inp.turn_count,
                pending_tool_calls=[],
                new_entry_ids=list(inp.new_entry_ids),
                usage=inp.usage,
            )
        return RunState(
            session_id=inp.session_id,
            run_id=inp.run_id,
            leaf_id=engine.leaf_id,
            status=engine.status,
            turn_count=engine.turn_count,
            pending_tool_calls=[ToolCallRef(id=c.id, name=c.name) for c in engine.pending_calls],
            new_entry_ids=list(engine.new_entry_ids),
            usage=engine.usage,
        )

    # -- effects (RunEffects) ----------------------------------------------------------------

    def now(self) -> datetime:
        return workflow.now()

    def new_id(self) -> str:
        return workflow_id_new()

    async def commit(self, stamped: Stamped) -> None:
        inp = self._input
        assert inp is not None
        self._ephemeral.extend(encode_entry(c) for c in stamped.copies if not is_durable(c))
        if not stamped.durable:
            return
        if all(e.id in self._committed for e in stamped.durable):
            self._apply_stored_times(stamped, [self._committed.pop(e.id) for e in stamped.durable])
            return
        # the rest of a parallel batch rides along (see _ActivityTools): one append per batch
        extra = self._tools.batch_after(stamped.durable) if self._tools is not None else []
        wires = [encode_entry(e) for e in [*stamped.durable, *extra]]
        for wire in wires:
            _check_payload(wire, "entry")
        t = inp.timeouts
        write: asyncio.Future[AppendResult] = asyncio.ensure_future(
            call_activity(
                "durable_agent.append_entries",
                AppendInput(session_id=inp.session_id, entries=wires),
                AppendResult,
                start_to_close=t.store_start_to_close,
                retry=store_retry(t),
                heartbeat=t.store_heartbeat,
                summary=store_summary([*stamped.durable, *extra]),
            )
        )
        try:
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # stream.cancel() arrived while the write was in flight. Abandoning it would
                # leave an entry stored without its receipt (and the cancel results on a
                # sibling branch): let it finish, let the engine record it, and resume the
                # cancellation at the next event (see emit).
                await write
                self._cancel_deferred = True
        except ActivityError as exc:
            raise _ActivityFailure(*_failure(exc)) from exc
        times = write.result().times
        if extra and self._tools is not None:
            self._tools.batch_committed(extra, times[len(stamped.durable) :])
        self._apply_stored_times(stamped, times[: len(stamped.durable)])

    @staticmethod
    def _apply_stored_times(stamped: Stamped, times_list: list[StoredTimes]) -> None:
        """Make the receipt name what the store holds (see AppendResult)."""
        fixed = {}
        for i, (entry, times) in enumerate(zip(stamped.durable, times_list, strict=True)):
            stored = with_stored_times(entry, times)
            if stored is not entry:
                stamped.durable[i] = fixed[entry.id] = stored
        if fixed:
            stamped.copies[:] = [fixed.get(c.id, c) for c in stamped.copies]

    async def emit(self, event: Event) -> None:
        agent_event = event.agent
        if agent_event is not None and agent_event.type in UNRECORDED:
            return
        if agent_event is not None and agent_event.type == "turn_end" and self._too_large:
            # a tool result over the payload limit: its call is answered (stored, like every
            # other result of the turn), then the run fails with PayloadTooLargeError
            raise self._too_large
        if agent_event is not None and agent_event.type == "agent_end":
            # The loop only knows this execution's part of the run (continue-as-new restarts
            # it), and the whole transcript does not belong in a query answer: the run's usage
            # goes out here, the client fills ``messages`` from the receipts it applied.
            engine = self._engine
            assert engine is not None
            agent_event = agent_event.model_copy(update={"messages": [], "usage": engine.usage})
            event = event.model_copy(update={"agent": agent_event})
        ids = None if event.entries is None else [e.id for e in event.entries]
        self._bodies.record(self._events, event_to_wire(event, self._next_position), ids)
        self._next_position += 1
        if self._cancel_deferred and not self._committed:
            # (entries already stored for later events, a parallel batch's, get theirs first)
            self._cancel_deferred = False
            raise asyncio.CancelledError()
        if agent_event is not None and agent_event.type == "turn_end":
            self._turns_this_execution += 1
            self._maybe_continue_as_new(agent_event.message)

    # -- continue-as-new ---------------------------------------------------------------------

    def _maybe_continue_as_new(self, assistant: Message | None) -> None:
        inp, engine = self._input, self._engine
        assert inp is not None and engine is not None
        if assistant is None or assistant.stop_reason in ("error", "aborted"):
            return
        if not [c for c in assistant.tool_calls() if not c.server]:
            return  # the run ends after this turn
        max_turns = inp.options.get("max_turns", self._max_turns)
        if max_turns is not None and engine.turn_count >= max_turns:
            return
        forced = inp.continue_as_new_after_turns
        due = forced is not None and self._turns_this_execution >= forced
        if not (due or workflow.info().is_continue_as_new_suggested()):
            return
        if workflow.patched(BOUNDED_CAN):
            # positions and entry IDs, not message bodies: the input stays a few KB whatever
            # the messages (issue 16), so it can hold the last two turns, and a client that
            # polled just before the previous turn's end does not see a gap
            last_turn = carried(_last_turn(self._events, turns=CARRIED_TURNS))
        else:
            last_turn = _last_turn(self._events)
        workflow.continue_as_new(
            inp.model_copy(
                update={
                    "leaf_id": engine.leaf_id,
                    "inputs": [],
                    "resumed": True,
                    "turn_count": engine.turn_count,
                    "usage": engine.usage,
                    "new_entry_ids": list(engine.new_entry_ids),
                    "next_position": self._next_position,
                    "events": last_turn,
                    "ephemeral": list(self._ephemeral),
                    "start_leaf_id": self._start_leaf,
                }
            )
        )

    # -- the run -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> RunResult:
        inp = read_run_input(raw)
        self._input = inp
        self._events = self._bodies.adopt(inp.events)
        self._next_position = inp.next_position
        self._ephemeral = list(inp.ephemeral)
        t = inp.timeouts
        ensure_session_attribute(inp.session_id)
        leaf = inp.leaf_id
        try:
            if leaf is None:
                leaf = await call_activity(
                    "durable_agent.ensure_session",
                    EnsureSessionInput(
                        session_id=inp.session_id, agent=inp.agent, reset_of=_reset_of()
                    ),
                    str,
                    start_to_close=t.store_start_to_close,
                    retry=store_retry(t),
                    heartbeat=t.store_heartbeat,
                    summary="ensure session",
                )
            info = await call_activity(
                "durable_agent.load_path",
                LoadPathInput(session_id=inp.session_id, leaf_id=leaf, agent=inp.agent),
                PathInfo,
                start_to_close=t.store_start_to_close,
                retry=store_retry(t),
                heartbeat=t.store_heartbeat,
                summary="load path",
            )
        except ActivityError as exc:
            if _cancelled(exc):
                raise CancelledError("run cancelled") from exc
            raise _as_failure(exc) from exc
        self._max_turns = info.max_turns
        self._start_leaf = inp.start_leaf_id if inp.start_leaf_id is not None else leaf
        engine = RunEngine(inp.session_id, leaf, self)
        engine.turn_count = inp.turn_count
        engine.usage = inp.usage
        engine.new_entry_ids = list(inp.new_entry_ids)
        self._engine = engine
        max_turns = inp.options.get("max_turns", info.max_turns)
        remaining = None if max_turns is None else max(1, max_turns - inp.turn_count)
        self._tools = _ActivityTools(self, {i.name: i for i in info.tools})
        loop = ModelLoop(
            _ActivityModel(self),
            AgentOptions(tools=tuple(_descriptor(i) for i in info.tools), max_turns=remaining),
            tool_executor=self._tools,
        )
        inputs = [item.entry(i, workflow.now()) for i, item in enumerate(inp.inputs)]
        try:
            receipt = []
            if not inp.resumed:
                now = workflow.now()
                repairs = [
                    MessageEntry(message=m, synthetic=True, created_at=now) for m in info.repairs
                ]
                receipt = await engine.start(inputs, repairs)
            await engine.drive(loop, inputs, receipt, resumed=inp.resumed)
            aborted = False
        except Exception as exc:
            if not _cancelled(exc):
                engine.status = "failed"
                raise _as_failure(exc) from exc
            aborted = True
        except asyncio.CancelledError:
            aborted = True
        if aborted:
            # as in-process: the partial reply (if the model call was cut), then a cancelled
            # result for every unanswered call, each with its receipt
            reply, self._aborted_reply = self._aborted_reply, None
            if reply is not None:
                await engine.store_message(reply)
            await engine.cancel()
            raise CancelledError("run cancelled")
        return RunResult(
            status="completed",
            leaf_id=engine.leaf_id,
            new_entry_ids=list(engine.new_entry_ids),
            usage=engine.usage,
            turn_count=engine.turn_count,
        )

    # used by the proxies

    def model_call(self) -> CallModelInput:
        inp, engine = self._input, self._engine
        assert inp is not None and engine is not None
        return CallModelInput(
            session_id=inp.session_id,
            leaf_id=engine.leaf_id,
            agent=inp.agent,
            options=inp.options,
            ephemeral=list(self._ephemeral),
            start_leaf_id=self._start_leaf,
            # the loop pulls the model call only after the engine recorded its message_start,
            # the last event so far: its position keys the reply's live deltas
            run_id=inp.run_id,
            position=self._next_position - 1,
        )


def _reset_of() -> str | None:
    """The original run when this execution is an operator's reset of it, else ``None``.

    A reset execution keeps the original's start event, so its ``original_execution_run_id``
    names another run; a continue-as-new execution carries its leaf and never asks. The patch is
    taken before looking at run IDs (which a replayer may not reproduce): the answer only feeds
    an activity argument, so replay stays deterministic whatever it is."""
    if not workflow.patched(RESET_START_LEAF):
        return None
    info = workflow.info()
    if info.continued_run_id is not None or info.run_id == info.original_execution_run_id:
        return None
    return info.original_execution_run_id


def _last_turn(events: list[WireEvent], turns: int = 1) -> list[WireEvent]:
    """The events since the ``turns``-th last ``turn_start`` (what continue-as-new carries)."""
    seen = 0
    for i in range(len(events) - 1, -1, -1):
        agent = events[i].agent
        if agent is not None and agent.type == "turn_start":
            seen += 1
            if seen == turns:
                return events[i:]
    return events[-50 * turns :] if seen == 0 else events


def store_summary(entries: list[Any]) -> str:
    """What an ``append_entries`` activity stores, in words (its summary in the Temporal UI)."""
    messages = [e.message for e in entries if isinstance(e, MessageEntry)]
    repairs = sum(1 for e in entries if isinstance(e, MessageEntry) and e.synthetic)
    rest = len(entries) - repairs
    parts = []
    if repairs:
        parts.append(f"repair ({repairs} call{'' if repairs == 1 else 's'})")
    if rest:
        results = [m for m in messages if m.role == "tool_result"]
        if messages and len(results) == rest and all(m.is_error for m in results):
            cancelled = all(m.text() == "tool execution cancelled" for m in results)
            parts.append("cancellation results" if cancelled else "tool failure results")
        elif len(messages) == rest and all(m.role == "assistant" for m in messages):
            parts.append("model reply")
        elif messages and len(results) == rest:
            parts.append("tool results")
        else:
            parts.append("input")
    return "store " + " + ".join(parts)


def _check_payload(payload: str, what: str, limit: int = PAYLOAD_LIMIT) -> None:
    size = len(payload.encode("utf-8"))
    if size > limit:
        raise PayloadTooLargeError(f"{what} is {size} bytes, over the {limit}-byte payload limit")


class _ActivityFailure(Exception):
    """An activity's failure as its own error (type name and message), so a store error reads
    ``persist message: <the store's message>`` exactly as in-process."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _payload_too_large(exc: BaseException | None) -> str | None:
    """The message of a PayloadTooLargeError anywhere in ``exc``'s cause chain."""
    while exc is not None:
        if isinstance(exc, PayloadTooLargeError):
            return str(exc)
        if isinstance(exc, _ActivityFailure) and exc.kind == "PayloadTooLargeError":
            return str(exc)
        if isinstance(exc, ActivityError):
            kind, message = _failure(exc)
            if kind == "PayloadTooLargeError":
                return message
        exc = exc.__cause__
    return None


def _as_failure(exc: BaseException) -> ApplicationError:
    """The run's failure as the client will re-raise it (type name kept, never retried)."""
    too_large = _payload_too_large(exc)
    if too_large is not None:
        return ApplicationError(too_large, type="PayloadTooLargeError", non_retryable=True)
    if isinstance(exc, ModelError):
        return ApplicationError(str(exc), exc.retryable, type="ModelError", non_retryable=True)
    if isinstance(exc, ActivityError):
        kind, message = _failure(exc)
        return ApplicationError(message, type=kind, non_retryable=True)
    if isinstance(exc, (AgentError, ApplicationError)):
        if isinstance(exc, ApplicationError):
            return exc
        return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)
    return ApplicationError(
        f"{type(exc).__name__}: {exc}", type=type(exc).__name__, non_retryable=True
    )


class _ActivityModel:
    """The loop's model inside the workflow: one ``call_model`` activity per call.

    ``message_start`` is emitted when the call is scheduled (activities do not stream into
    history); the reply arrives whole, with its usage and stop reason.
    """

    def __init__(self, wf: RunWorkflow) -> None:
        self.wf = wf

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelEvent(type="start", partial=Message(role="assistant"))
        wf = self.wf
        inp = wf._input
        assert inp is not None
        t = inp.timeouts
        # the plain model_retry option means the same as in-process: attempts and first backoff
        retry = inp.options.get("model_retry") or {}
        attempts = int(retry.get("max_attempts", t.model_max_attempts))
        initial = float(retry.get("initial_interval", t.retry_initial))
        engine = wf._engine
        assert engine is not None
        call = wf.model_call()
        stamp: Stamp | None = None
        if workflow.patched(PRODUCER_COMMIT):
            # the producer commits its own reply under this header: one activity per turn
            stamp = Stamp(
                id=workflow_id_new(),
                parent_id=engine.leaf_id or None,
                created_at=format_time(workflow.now()),
            )
            call = call.model_copy(update={"stamp": stamp})
        try:
            reply = await call_activity(
                "durable_agent.call_model",
                call,
                ModelReply,
                start_to_close=t.model_start_to_close,
                heartbeat=t.model_heartbeat,
                retry=RetryPolicy(
                    initial_interval=timedelta(seconds=max(initial, 0.01)),
                    maximum_interval=timedelta(seconds=t.retry_max),
                    maximum_attempts=attempts,
                    non_retryable_error_types=["UnknownAgentError", "EntryNotFoundError"],
                ),
                summary=f"model call (turn {(wf._engine.turn_count if wf._engine else 0) + 1})",
                wait_for_cancel=True,
            )
        except ActivityError as exc:
            if _cancelled(exc):
                raise asyncio.CancelledError() from exc
            if workflow.cancellation_reason() is not None and workflow.patched(CANCEL_WINS):
                # The user cancelled while the call could not answer (its worker died): the
                # call ends with its heartbeat timeout, but the run ends cancelled (issue 16).
                raise asyncio.CancelledError() from exc
            kind, text = _failure(exc)
            if kind == "ModelError":
                cause = exc.cause
                details = cause.details if isinstance(cause, ApplicationError) else ()
                retryable = bool(details[0]) if details else False
                raise ModelError(text, retryable=retryable) from exc
            raise
        if reply.cancelled and reply.stored is None:
            # the run is being cancelled: the workflow stores the partial reply on its cancel
            # path, like the in-process engine (no turn_end or agent_end follows)
            wf._aborted_reply = reply.message
            raise asyncio.CancelledError()
        if reply.stored is not None and (
            reply.cancelled or workflow.cancellation_reason() is not None
        ):
            # the run was cancelled while the activity stored the complete reply (the activity
            # may not have heard of it): the reply gets its receipt, then the cancellation
            # proceeds (see emit)
            wf._cancel_deferred = True
        if stamp is not None and reply.stored is not None:
            wf._committed[stamp.id] = reply.stored
            engine.expect_committed(stamp.id, parse_time(reply.stored.created_at))
        yield ModelEvent(type="done", partial=reply.message)


class _ActivityTools:
    """Runs each tool call as a ``call_tool`` activity with the tool's own retry policy; a call
    the retries give up on is answered with ``tool execution failed: …`` (SPEC §5.3).

    **Who commits a result** (issue 10 item 2). A call that runs alone (a turn's only call, or
    one of a turn's sequential calls) gets a stamp, parent = the current leaf, and ``call_tool``
    commits its result under it (stamp-first lookup: a result that is stored never runs again),
    so the tool leg costs one activity. A turn's *parallel* calls get no stamp: their results
    are committed in **one batch** (one ``append_entries``, chained in call order) once all of
    them finished, and the engine records them one receipt each.
    Producers committing concurrently would land in completion order, and SPEC §2.1 resumes from
    the **last entry in append order** while §4.4 chains results **in call order**: a reopened
    handle (or a run terminated mid-batch) would resume from the wrong result, or from a chain
    with a hole where an earlier call's result never landed. Committing after the batch keeps
    append order == chain order; a crash mid-batch loses nothing either, because the results
    of finished calls are in the workflow's history and are not run again.
    """

    def __init__(self, wf: RunWorkflow, tools: dict[str, ToolInfo]) -> None:
        self.wf = wf
        self.tools = tools
        self._finished: dict[str, Message] = {}
        """Results of this turn's parallel calls, by call ID, until they are committed."""

    def batch_after(self, durable: list[Entry]) -> list[Entry]:
        """The rest of a parallel batch to append with ``durable`` (the engine's commit of the
        batch's first result), chained after it in call order; ``[]`` when ``durable`` is not
        such a result or the batch is not complete."""
        engine = self.wf._engine
        assert engine is not None
        if len(durable) != 1 or not isinstance(durable[0], MessageEntry):
            return []
        first = durable[0]
        pending = [c.id for c in engine.pending_calls]
        if not pending or first.message.tool_call_id != pending[0] or len(pending) < 2:
            return []
        rest = pending[1:]
        if len(set(pending)) != len(pending) or any(i not in self._finished for i in rest):
            return []
        if not workflow.patched(TOOL_COMMIT):
            return []
        parent, out = first.id, list[Entry]()
        for call_id in rest:
            entry = MessageEntry(
                id=workflow_id_new(),
                parent_id=parent,
                created_at=first.created_at,
                message=self._finished[call_id],
            )
            out.append(entry)
            parent = entry.id
        return out

    def batch_committed(self, extra: list[Entry], times: list[StoredTimes]) -> None:
        """The batch's later results are stored: the engine records each under its ID."""
        engine = self.wf._engine
        assert engine is not None
        for entry, stored in zip(extra, times, strict=True):
            assert isinstance(entry, MessageEntry)
            call_id = entry.message.tool_call_id
            self._finished.pop(call_id or "", None)
            self.wf._committed[entry.id] = stored
            engine.expect_committed(entry.id, parse_time(stored.created_at), call_id)

    def _runs_alone(self, call: ToolCall) -> bool:
        """The loop's own rule (``ModelLoop._run_tools``): a turn's calls run concurrently when
        there are several and every called tool is parallel-safe."""
        engine = self.wf._engine
        assert engine is not None
        turn = next((m for m in reversed(engine.produced) if m.role == "assistant"), None)
        calls = [c for c in turn.tool_calls() if not c.server] if turn is not None else [call]
        infos = [self.tools.get(c.name) for c in calls]
        return not (len(calls) > 1 and all(i is not None and i.parallel_safe for i in infos))

    def _stamp(self, call: ToolCall) -> Stamp | None:
        engine = self.wf._engine
        assert engine is not None
        if not self._runs_alone(call) or not workflow.patched(TOOL_COMMIT):
            return None
        return Stamp(
            id=workflow_id_new(),
            parent_id=engine.leaf_id or None,
            created_at=format_time(workflow.now()),
        )

    async def execute(
        self, tool: Tool | None, call: ToolCall, report: Callable[[str], Awaitable[None]]
    ) -> Message:
        inp, engine = self.wf._input, self.wf._engine
        assert inp is not None and engine is not None
        info = self.tools.get(call.name) or ToolInfo(name=call.name, max_attempts=1)
        stamp = self._stamp(call)
        t = inp.timeouts
        try:
            answer: Message | ToolReply = await call_activity(
                "durable_agent.call_tool",
                CallToolInput(
                    session_id=inp.session_id,
                    agent=inp.agent,
                    call=call.model_dump(mode="json"),
                    stamp=stamp,
                ),
                Message if stamp is None else ToolReply,
                start_to_close=info.timeout,
                heartbeat=t.tool_heartbeat,
                retry=tool_retry(info, t),
                summary=f"tool {call.name}" + ("" if stamp is None else " (stores its result)"),
                # a stamped attempt may commit while a cancel is on its way: wait for its
                # outcome, so a stored result gets its receipt instead of a cancelled sibling
                wait_for_cancel=stamp is not None,
            )
        except ActivityError as exc:
            if _cancelled(exc):
                raise asyncio.CancelledError() from exc
            kind, text = _failure(exc)
            if kind == "PayloadTooLargeError" and self.wf._too_large is None:
                self.wf._too_large = PayloadTooLargeError(text)
            answer = error_tool_result_message(
                call.id,
                call.name,
                f"tool execution failed: {kind}: {text}",
                timestamp=workflow.now(),
            )
            stamp = None
        if isinstance(answer, Message):
            if not self._runs_alone(call):
                self._finished[call.id] = answer
            return answer
        assert stamp is not None
        landed: Message | None = None
        if workflow.cancellation_reason() is not None:
            self.wf._cancel_deferred = True  # recorded first, then the cancellation proceeds
            if workflow.patched(TOOL_LANDED):
                # the loop may be unwinding already and never yield it: the engine's cancel
                # records it instead of a "cancelled" sibling (issue 11 item 1 on Temporal)
                landed = answer.message
        self.wf._committed[stamp.id] = answer.stored
        engine.expect_committed(
            stamp.id, parse_time(answer.stored.created_at), call.id, landed=landed
        )
        return answer.message


def tool_retry(info: ToolInfo, t: Timeouts) -> RetryPolicy:
    """The tool's own retry policy (attempts, backoff); a crashed worker is noticed by the
    heartbeat timeout, as for model calls."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=info.initial_interval),
        backoff_coefficient=info.backoff,
        maximum_interval=timedelta(seconds=max(info.max_interval, 1.0)),
        maximum_attempts=info.max_attempts,
        non_retryable_error_types=[*info.non_retryable, "PayloadTooLargeError"],
    )
