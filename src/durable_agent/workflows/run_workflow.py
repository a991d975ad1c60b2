"""The run workflow: the shared :class:`RunEngine` with activities as its effects.

The engine and the loop run here unchanged; only the effects differ from in-process: IDs come from
``workflow.random()``, times from ``workflow.now()``, commits are ``append_entries`` activities,
model and tool calls are activities, and events are recorded (after their commit) for the
``events(after)`` query. Queries add no history, so a client polling them costs nothing durable.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Mapping
from datetime import datetime
from operator import attrgetter
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from ..activities.calls import store_summary, workflow_id_new
    from ..activities.failures import (
        ActivityFailure,
        activity_failure,
        is_cancellation,
        run_failure,
    )
    from ..activities.model_proxy import ActivityModel
    from ..activities.tool_proxy import ActivityTools, tool_descriptor
    from ..agent.loop import ModelLoop
    from ..agent.options import AgentOptions
    from ..ai.messages import Message
    from ..ai.timefmt import parse_time
    from ..durable.engine import RunEngine
    from ..durable.errors import PayloadTooLargeError, RunCancelledError
    from ..durable.events import Event
    from ..durable.limits import check_payload
    from ..durable.persist import Stamped, is_durable
    from ..session.codec import encode_entry
    from ..session.repair import repair_entries
    from .activity_calls import (
        SESSION_ID_KEY,
        call_activity,
        ensure_session_attribute,
        store_retry,
    )
    from .event_bodies import (
        QUERY_INLINE_LIMIT,
        BodyTracker,
        SlimCache,
        carried,
        last_turns,
        result_tail,
    )
    from .run_input import NO_INPUT, read_run_input
    from .run_start import LOCAL_STORE, open_path
    from .types import (
        AppendInput,
        AppendResult,
        CallModelInput,
        EventsAnswer,
        RunInput,
        RunResult,
        RunState,
        StoredTimes,
        Timeouts,
        ToolCallRef,
        WireEvent,
        event_to_wire,
        with_stored_times,
    )

__all__ = ["SESSION_ID_KEY", "RunWorkflow", "store_summary", "workflow_id_new"]

QUERY_BUDGET = 480 * 1024
"""Bytes of events one ``events`` answer holds at most (beyond its first event): under the 512 KiB
at which the Temporal SDK logs a warning for every larger query answer (TMPRL1103), which an
operator's query from position 0 of a long run used to trigger; a client behind by more asks again
at once (SPEC §7.4 bounds an answer at about 1 MiB)."""
BOUNDED_CAN = "bounded-can-v1"
"""Patch marker: executions started before it carry the last turn's events with their bodies."""
CARRIED_TURNS = 2
"""Turns of events continue-as-new carries (since ``bounded-can-v1``), bodies left out."""
UNRECORDED = frozenset({"message_update", "tool_execution_update"})


@workflow.defn(name="durable_agent.run")
class RunWorkflow:
    """One durable agent run (SPEC §7). ID ``durable-agent/<session_id>/run/<run_id>``."""

    def __init__(self) -> None:
        self._input: RunInput | None = None
        self._engine: RunEngine | None = None
        self._events: list[WireEvent] = []
        self._bodies = BodyTracker()
        """Which stored entry each recorded message body is (see event_bodies)."""
        self._query_sizes = SlimCache(QUERY_INLINE_LIMIT)
        """What the ``events`` query sends of each event, and its size (queries only)."""
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
        self._tools: ActivityTools | None = None
        self._local_store = False
        """Store steps run as local activities (since ``local-store-v1``)."""
        self._unsure: list[str] = []
        """Entries of local appends that failed (they may have been stored all the same)."""
        self._committed: dict[str, StoredTimes] = {}
        """Entries their producing activity already stored (ID -> stored times): their commit
        records the receipt without an ``append_entries`` activity (SPEC §7.2)."""

    # -- queries -----------------------------------------------------------------------------

    @workflow.query(name="events")
    def events(self, after: int = 0) -> EventsAnswer:
        """Retained events past position ``after``, in order, ``QUERY_BUDGET`` bytes at most (at
        least one event).

        Sizes are the real encoded bytes. An event over ``QUERY_INLINE_LIMIT`` goes without the
        message bodies its stored entries hold (the client reads them from the store), and one
        whose body is not stored yet waits for its receipt (the next poll gets it), so no answer
        nears Temporal's 2 MB limit whatever the message size (issue 16 item 2).

        ``after`` defaults to 0, so an operator can run the query from the UI or CLI with no
        arguments (issue 15 item 5)."""
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
            check_payload(wire, "entry")
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
                local=self._local_store,
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
            if self._local_store:
                # a local append's input is not in the history: the failure names what it
                # may have stored, for the client's next run start to reconcile (11.8b)
                self._unsure.extend(e.id for e in [*stamped.durable, *extra])
            raise ActivityFailure(*activity_failure(exc)) from exc
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
        if self.patched(BOUNDED_CAN):
            # positions and entry IDs, not message bodies: the input stays a few KB whatever
            # the messages (issue 16), so it can hold the last two turns, and a client that
            # polled just before the previous turn's end does not see a gap
            last_turn = carried(last_turns(self._events, CARRIED_TURNS))
        else:
            last_turn = last_turns(self._events, 1)
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
        ensure_session_attribute(inp.session_id)
        self._local_store = workflow.patched(LOCAL_STORE)
        leaf, info = await open_path(inp, local=self._local_store)
        self._max_turns = info.max_turns
        self._start_leaf = inp.start_leaf_id if inp.start_leaf_id is not None else leaf
        engine = RunEngine(inp.session_id, leaf, self)
        engine.turn_count = inp.turn_count
        engine.usage = inp.usage
        engine.new_entry_ids = list(inp.new_entry_ids)
        self._engine = engine
        max_turns = inp.options.get("max_turns", info.max_turns)
        remaining = None if max_turns is None else max(1, max_turns - inp.turn_count)
        self._tools = ActivityTools(self, {i.name: i for i in info.tools})
        loop = ModelLoop(
            ActivityModel(self),
            AgentOptions(tools=tuple(tool_descriptor(i) for i in info.tools), max_turns=remaining),
            tool_executor=self._tools,
        )
        inputs = [item.entry(i, workflow.now()) for i, item in enumerate(inp.inputs)]
        repairs = [] if inp.resumed else repair_entries(info.repairs, workflow.now())
        try:
            # as in-process; cancelled: the partial reply (if the model call was cut), then a
            # cancelled result for every unanswered call, each with its receipt
            await engine.run(
                loop,
                inputs,
                repairs,
                resumed=inp.resumed,
                aborted=self._take_aborted,
                cancelled=is_cancellation,
                shield=False,
            )
        except RunCancelledError:
            raise CancelledError("run cancelled") from None
        except Exception as exc:
            if engine.status != "failed":
                raise  # the cancel steps themselves failed: as ever, not the run's failure
            raise run_failure(exc, self._unsure) from exc
        return RunResult(
            status="completed",
            leaf_id=engine.leaf_id,
            new_entry_ids=list(engine.new_entry_ids),
            usage=engine.usage,
            turn_count=engine.turn_count,
            tail=result_tail(self._events, CARRIED_TURNS),
        )

    # -- the proxies' host (RunHost) ----------------------------------------------------------

    @property
    def engine(self) -> RunEngine:
        assert self._engine is not None
        return self._engine

    @property
    def session_id(self) -> str:
        return self._run_input.session_id

    @property
    def agent(self) -> str:
        return self._run_input.agent

    @property
    def timeouts(self) -> Timeouts:
        return self._run_input.timeouts

    @property
    def options(self) -> Mapping[str, Any]:
        return self._run_input.options

    @property
    def _run_input(self) -> RunInput:
        assert self._input is not None
        return self._input

    def patched(self, patch_id: str) -> bool:
        # Since local-store-v1 every older patch is taken, without a marker: a patched() call
        # that follows a local activity can be replayed in the wrong workflow task (a query
        # that arrives during the task splits it after the local activity, and on replay the
        # next patch marker then lies in a later task than the call: a nondeterminism error).
        # Patches added later must be checked before the run's first local activity.
        return True if self._local_store else workflow.patched(patch_id)

    def producer_committed(
        self,
        entry_id: str,
        stored: StoredTimes,
        tool_call_id: str | None = None,
        *,
        landed: Message | None = None,
    ) -> None:
        self._committed[entry_id] = stored
        self.engine.expect_committed(
            entry_id, parse_time(stored.created_at), tool_call_id, landed=landed
        )

    def defer_cancel(self) -> None:
        self._cancel_deferred = True

    def keep_aborted(self, reply: Message) -> None:
        self._aborted_reply = reply

    def _take_aborted(self) -> Message | None:
        reply, self._aborted_reply = self._aborted_reply, None
        return reply

    def fail_turn(self, error: PayloadTooLargeError) -> None:
        if self._too_large is None:
            self._too_large = error

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
