"""The run workflow: the shared :class:`RunEngine` with activities as its effects.

The engine and the loop run here unchanged; only the effects differ from in-process: IDs come from
``workflow.random()``, times from ``workflow.now()``, commits are ``append_entries`` activities,
model and tool calls are activities, and events are recorded (after their commit) for the
``events(after)`` query. Queries add no history, so a client polling them costs nothing durable.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime
from operator import attrgetter

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

# Not passed through: under a sandbox that reloads durable_agent (Temporal's default runner), the
# package's __init__ has loaded every module of the block below in the sandbox already, and one
# first imported inside it would come from the host (its RunInput a class the sandbox's
# RunResult refuses).
from .run_input import NO_INPUT, input_entry, read_run_input
from .typed_input import events_after, read_body

with workflow.unsafe.imports_passed_through():
    from ..activities.contracts import CallModelInput, PathInfo, WireEvent, event_to_wire
    from ..activities.failures import (
        ActivityFailure,
        activity_failure,
        is_cancellation,
        run_failure,
    )
    from ..activities.model_call import ActivityModel, note_cancel
    from ..activities.reset_steps import keep_session_leaf
    from ..activities.run_contracts import EventsAnswer, ResetNote, RunInput, RunResult, RunState
    from ..activities.store_steps import append, new_entry_id, open_path
    from ..activities.tool_call import ActivityTools, tool_descriptor
    from ..agent.loop import ModelLoop
    from ..agent.options import AgentOptions
    from ..ai.messages import Message
    from ..durable.engine import RunEngine
    from ..durable.errors import RunActiveError, RunCancelledError
    from ..durable.events import Event
    from ..durable.inbox import Inbox
    from ..durable.persist import Header, Stamped, is_durable
    from ..session.approvals import AwaitingTurn, awaiting_turn
    from ..session.codec import decode_entry, encode_entry
    from ..session.repair import repair_entries
    from .event_bodies import QUERY_INLINE_LIMIT, BodyTracker, SlimCache, carried, last_turns
    from .run_mail import (
        DecideBody,
        SendBody,
        TemporalGate,
        accepted,
        check_decision,
        check_message,
        decision_of,
        delivered,
        message_of,
        run_state,
    )
    from .search import creation_unnamed, ensure_session_attribute, name_creation

__all__ = ["RunWorkflow"]

QUERY_BUDGET = 480 * 1024
"""Bytes of events one ``events`` answer holds at most (beyond its first event): under the 512 KiB
at which the Temporal SDK logs a warning for every larger query answer (TMPRL1103), which an
operator's query from position 0 of a long run used to trigger; a client behind by more asks again
at once."""
CARRIED_TURNS = 2
"""Turns of events continue-as-new carries, bodies left out."""
UNRECORDED = frozenset({"message_update", "tool_execution_update"})


@workflow.defn(name="durable_agent.run")
class RunWorkflow:
    """One durable agent run (docs/design.md#temporal). ID
    ``durable-agent/<session_id>/run/<run_id>``."""

    def __init__(self) -> None:
        self._input: RunInput | None = None
        self._engine: RunEngine | None = None
        self._tools: ActivityTools | None = None
        self._events: list[WireEvent] = []
        self._bodies = BodyTracker()
        """Which stored entry each recorded message body is (see event_bodies)."""
        self._query_sizes = SlimCache(QUERY_INLINE_LIMIT)
        """What the ``events`` query sends of each event, and its size (queries only)."""
        self._next_position = 1
        self._ephemeral: list[str] = []
        self._turns_this_execution = 0
        self._max_turns: int | None = None
        self._start_leaf = ""
        self._unsure: list[str] = []
        """Entries of local appends that failed (they may have been stored all the same)."""
        self._if_last: str | None = None  # guards the input's append: RunInput.if_last
        self._noted = False
        """The run's cancel note is written (or being written)."""
        self._reset_of: str | None = None
        """An operator's reset of this run: the original execution (see reset_steps)."""
        self._original_run = ""
        self._inbox = Inbox()
        """Decisions and messages for this run (the updates below), handed to its engine."""

    # -- queries -----------------------------------------------------------------------------

    @workflow.query(name="events")
    def events(self, raw: RawValue = NO_INPUT) -> EventsAnswer:
        """Retained events past position ``after``, in order, ``QUERY_BUDGET`` bytes at most (at
        least one event).

        Sizes are the real encoded bytes. An event over ``QUERY_INLINE_LIMIT`` goes without the
        message bodies its stored entries hold (the client reads them from the store), and one
        whose body is not stored yet waits for its receipt (the next poll gets it), so no answer
        nears Temporal's 2 MB limit whatever the message size (docs/design.md#bounded-history).

        ``after`` (an integer, read by ``events_after``) defaults to 0, so an operator can run
        the query from the UI or CLI with no arguments."""
        after = events_after(raw)
        out: list[WireEvent] = []
        size = 0
        events = self._events
        # positions increase along the list: start at the first one past ``after``
        for i in range(bisect_right(events, after, key=attrgetter("position")), len(events)):
            sized = self._query_sizes.sized(events[i], force=not self._bodies.pending(i))
            if sized is None:
                break
            sent, cost = sized
            if out and size + cost > QUERY_BUDGET:
                break
            out.append(sent)
            size += cost
        first = self._events[0].position if self._events else self._next_position
        return EventsAnswer(events=out, first_position=first, last_position=self._next_position - 1)

    @workflow.query(name="state")
    def state(self) -> RunState:
        inp = self._input
        if inp is None:  # the run failed on its input: the UI's Queries tab says so, not a blank
            raise ApplicationError("no state: the run's input was refused (see its failure)")
        return run_state(inp, self._engine, self._inbox)

    # -- updates (docs/design.md#approvals-and-steering) -------------------------------------

    # Both take the raw payload: what an operator typed is read (and refused, typed) by us

    @workflow.update(name="decide")
    async def decide(self, raw: RawValue = NO_INPUT) -> str:
        """A person's decision on a call this run waits for (a ``DecideBody``); the stored
        decision, encoded."""
        body = read_body(raw, DecideBody, "decide")
        return await delivered(self._inbox.decide(decision_of(body, workflow.now())))

    @decide.validator
    def _check_decide(self, raw: RawValue = NO_INPUT) -> None:
        body = read_body(raw, DecideBody, "decide")
        check_decision(self._engine, self._inbox, body)

    @workflow.update(name="send")
    async def send(self, raw: RawValue = NO_INPUT) -> str:
        """A message into the run (a ``SendBody``); the stored user message once delivered,
        encoded (or ``""`` once queued, as ``body.answer`` asks)."""
        body = read_body(raw, SendBody, "send")
        done = self._inbox.send(message_of(body, workflow.now()), body.when)
        return accepted(done) if body.answer == "accepted" else await delivered(done)

    @send.validator
    def _check_send(self, raw: RawValue = NO_INPUT) -> None:
        message = message_of(read_body(raw, SendBody, "send"), workflow.now())
        check_message(self._inbox, workflow.cancellation_reason() is not None, message)

    # -- effects (RunEffects) ----------------------------------------------------------------

    def now(self) -> datetime:
        return workflow.now()

    def new_id(self) -> str:
        return new_entry_id()

    async def commit(self, stamped: Stamped) -> Stamped:
        inp = self._input
        assert inp is not None
        self._ephemeral.extend(encode_entry(c) for c in stamped.copies if not is_durable(c))
        guard, self._if_last = self._if_last, None  # the input's only (``if_unchanged``)
        if not stamped.durable:
            return stamped
        try:
            return await append(inp.session_id, stamped, inp.timeouts, local=True, if_last=guard)
        except ActivityError as exc:
            kind, message = activity_failure(exc)
            if kind == "RunActiveError":  # nothing stored: the guard refused it
                raise RunActiveError(message) from None
            # a local append's input is not in the history: the failure names what it may
            # have stored, for the client's next run start to reconcile
            self._unsure.extend(e.id for e in stamped.durable)
            raise ActivityFailure(kind, message) from exc

    async def emit(self, event: Event) -> None:
        agent_event = event.agent
        if agent_event is not None and agent_event.type in UNRECORDED:
            return
        too_large = None if self._tools is None else self._tools.too_large
        if agent_event is not None and agent_event.type == "turn_end" and too_large:
            # a tool result over the payload limit: its call is answered (stored, like every
            # other result of the turn), then the run fails with PayloadTooLargeError
            raise too_large
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
        inbox = self._inbox
        if inbox.messages or inbox.decisions or not workflow.all_handlers_finished():
            return  # an update handler cannot outlive its execution
        max_turns = inp.options.get("max_turns", self._max_turns)
        if max_turns is not None and engine.turn_count >= max_turns:
            return
        forced = inp.continue_as_new_after_turns
        due = forced is not None and self._turns_this_execution >= forced
        if not (due or workflow.info().is_continue_as_new_suggested()):
            return
        # positions and entry IDs, not message bodies: the input stays a few KB whatever the
        # messages, so it can hold the last two turns, and a client that polled just before the
        # previous turn's end does not see a gap (docs/design.md#continue-as-new)
        last_turns_carried = carried(last_turns(self._events, CARRIED_TURNS))
        workflow.continue_as_new(
            inp.model_copy(
                update={
                    "leaf_id": engine.leaf_id,
                    "create_session": False,
                    "inputs": [],
                    "resumed": True,
                    "turn_count": engine.turn_count,
                    "usage": engine.usage,
                    "new_entry_ids": list(engine.new_entry_ids),
                    "next_position": self._next_position,
                    "events": last_turns_carried,
                    "ephemeral": list(self._ephemeral),
                    "start_leaf_id": self._start_leaf,
                    "reset_of": self._reset_of,
                }
            )
        )

    # -- the run -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> RunResult:
        inp = read_run_input(raw)
        self._input = inp
        self._events = list(inp.events)
        self._next_position = inp.next_position
        self._ephemeral = list(inp.ephemeral)
        self._reset_of, self._if_last = inp.reset_of, None if inp.resumed else inp.if_last
        self._original_run = workflow.info().original_execution_run_id
        # a reset past the first workflow task reseeds the randomness at its reset point
        workflow.register_random_seed_callback(self._reseeded)
        ensure_session_attribute(inp.session_id)
        leaf, info = await open_path(inp, creation=creation_unnamed())
        name_creation(info.created_at)  # the busy checks' memo (docs/design.md#retention)
        if info.reset_of and not inp.resumed:  # a reset to the first task: an operator's retry,
            # stored whatever the session holds now (``if_unchanged`` guarded the first start)
            self._reset_of, self._if_last = info.reset_of, None
        self._max_turns = info.max_turns
        self._start_leaf = inp.start_leaf_id if inp.start_leaf_id is not None else leaf
        engine = RunEngine(inp.session_id, leaf, self, run_id=inp.run_id)
        engine.inbox = self._inbox
        engine.turn_count = inp.turn_count
        engine.usage = inp.usage
        engine.new_entry_ids = list(inp.new_entry_ids)
        self._engine = engine
        loop, waiting = self._loop(inp, info, engine)
        inputs = [input_entry(item, workflow.now()) for item in inp.inputs]
        repairs = [] if inp.resumed else repair_entries(info.repairs, workflow.now())
        try:
            # as in-process; cancelled: the partial reply (if the model call was cut), then a
            # cancelled result for every unanswered call, each with its receipt
            await engine.run(
                loop,
                inputs,
                repairs,
                resumed=inp.resumed,
                cancelled=is_cancellation,
                shield=False,
                # the client's input IDs tell it the run's entries in the store
                # (docs/design.md#receipts); a reset to the first task stores its input again
                # under new IDs, a sibling of the original's, as the rest of its retry
                keep_input_ids=not info.reset_of,
                waiting=waiting,
            )
        except RunCancelledError:
            await self._keep_session_leaf()
            raise CancelledError("run cancelled") from None
        except Exception as exc:
            if engine.status != "failed":
                raise  # the cancel steps themselves failed: as ever, not the run's failure
            await self._keep_session_leaf()
            raise run_failure(exc, self._unsure) from exc
        reset = await self._keep_session_leaf()
        return RunResult(
            status="awaiting_approval" if engine.status == "awaiting_approval" else "completed",
            leaf_id=engine.leaf_id,
            new_entry_ids=list(engine.new_entry_ids),
            usage=engine.usage,
            turn_count=engine.turn_count,
            reset=reset,
        )

    def _loop(
        self, inp: RunInput, info: PathInfo, engine: RunEngine
    ) -> tuple[ModelLoop, AwaitingTurn | None]:
        """The run's loop, its model and tools as activities, and the stored turn whose calls
        wait for people (then the run starts from it: docs/design.md#approvals-and-steering)."""
        max_turns = inp.options.get("max_turns", info.max_turns)
        remaining = None if max_turns is None else max(1, max_turns - inp.turn_count)
        tools = {i.name: i for i in info.tools}
        self._tools = ActivityTools(
            engine,
            inp.session_id,
            inp.agent,
            tools,
            inp.timeouts,
            run_id=inp.run_id,
            on_cancel=self._note_cancel,
        )
        retry = inp.options.get("model_retry")
        model = ActivityModel(engine, inp.timeouts, self._call_input, self._note_cancel, retry)
        wait = inp.options.get("approval_wait", info.approval_wait)
        engine.gate = TemporalGate(model, None if wait is None else float(wait))
        waiting = awaiting_turn([decode_entry(w) for w in info.waiting]) if info.waiting else None
        if waiting is not None and inp.start_leaf_id is None:
            # the run goes on from the stored reply: the model sees it as the run's own
            self._start_leaf = waiting.assistant_parent
        options = AgentOptions(
            tools=tuple(tool_descriptor(i) for i in info.tools), max_turns=remaining
        )
        return ModelLoop(model, options, tool_executor=self._tools), waiting

    def _reseeded(self, _seed: int) -> None:
        # called while the activation's jobs are applied, outside workflow code: no info() here
        self._reset_of = self._reset_of or self._original_run

    async def _keep_session_leaf(self) -> ResetNote | None:
        """A reset run's last step: keep the session's active branch (activities.reset_steps);
        ``None`` for every other run, which schedules nothing here."""
        inp, engine = self._input, self._engine
        assert inp is not None and engine is not None
        if self._reset_of is None:
            return None
        return await keep_session_leaf(
            inp.session_id, self._reset_of, list(engine.new_entry_ids), inp.timeouts
        )

    def _call_input(self, stamp: Header) -> CallModelInput:
        """The next ``call_model`` input around the reply's header ``stamp``."""
        inp, engine = self._input, self._engine
        assert inp is not None and engine is not None
        return CallModelInput(
            session_id=inp.session_id,
            leaf_id=engine.leaf_id,
            agent=inp.agent,
            start_leaf_id=self._start_leaf,
            stamp=stamp,
            options=inp.options,
            ephemeral=list(self._ephemeral),
            # the reply's turn keys its live deltas: its model call's number in the run, which
            # a client following the run's stored entries counts alike
            run_id=inp.run_id,
            turn=engine.turn_count + 1,
        )

    async def _note_cancel(self) -> None:
        """Write the run's cancel note (once), so its calls in flight stop at once."""
        inp = self._input
        assert inp is not None
        if not self._noted:
            self._noted = True
            await note_cancel(inp.session_id, inp.run_id)
