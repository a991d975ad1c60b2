"""The run engine: one implementation of a durable run, driven by two executors.

The engine owns the whole run (:meth:`RunEngine.run`): it stores the run's input (after the
run-start repair its executor computed), runs the loop, stores every produced message before it
emits that message's event (the event is the entry's **receipt**), marks a failed run, and on
cancellation stores what the user saw. A cancellation that arrives while a commit is in flight
waits for it and for its receipt, so the store never holds an entry the run did not record.

Every entry is stamped by :mod:`.persist`. An entry may be stored ahead of its ``message_end``:
by a producer committing its own output under a header the engine reserved, or in a batch
committed ahead; the engine then records that entry as the receipt
(docs/design.md#stamps-and-producers). Side effects go through :class:`RunEffects` (in process:
the handle's state and a queue; on Temporal: activities, ``workflow.now()``, ``workflow.random()``),
so the engine does no I/O, reads no clock and runs unchanged inside a workflow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import NoReturn, Protocol

from ..agent.events import AgentEvent
from ..agent.loop import AgentRun, Loop
from ..ai.messages import Message, ToolCall, Usage, error_tool_result_message
from ..session.approvals import AwaitingTurn
from ..session.entries import Entry, MessageEntry
from . import approvals
from .answers import CANCELLED_TEXT, aborted_message, stored_key, too_large
from .approvals import ApprovalGate, Parked, RunStatus, Waiting, ask_people, resume_turn
from .errors import PersistError, RunActiveError, RunCancelledError, RunNotAcceptingError
from .events import Event
from .inbox import Inbox
from .persist import CommitEffects, Header, Stamped, reserve, see_through, stamp

__all__ = ["CANCELLED_TEXT", "RunEffects", "RunEngine", "RunStatus", "aborted_message"]


class RunEffects(CommitEffects, Protocol):
    """Stamping and commits (:class:`~.persist.CommitEffects`) and an event sink."""

    async def emit(self, event: Event) -> None:
        """Deliver a run event; called only after the entries it names are committed."""
        ...


class RunEngine:
    """Drives one run. Its public attributes are the live state a ``state()`` query reports."""

    def __init__(
        self,
        session_id: str,
        leaf_id: str,
        effects: RunEffects,
        *,
        run_id: str = "",
        gate: ApprovalGate | None = None,
    ) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.gate = gate  # approval rules and the wait for people; None: no call ever waits
        self.inbox = Inbox()  # decisions and messages people hand this run while it is live
        self.waiting: Waiting | None = None  # the turn whose calls wait (kept when it parked)
        self.leaf_id = leaf_id
        self.effects = effects
        self.status: RunStatus = "starting"
        self.turn_count = 0
        """Completed model calls."""
        self.usage = Usage()
        self.new_entry_ids: list[str] = []
        self.produced: list[Message] = []
        """Messages of the ``message_end`` receipts, in order (what ``wait()`` returns)."""
        self.pending_calls: list[ToolCall] = []
        """Calls of the last assistant message without a stored result."""
        self._partial: Message | None = None
        self._cut: Message | None = None
        """The partial reply a cancelled model producer returned (see :meth:`keep_partial`)."""
        self._stored: dict[str, MessageEntry] = {}
        """Entries stored ahead of their ``message_end`` (by :func:`_key`)."""
        self._cancel_pending = False
        """A cancellation that arrived during a commit, raised once that commit's receipt is out."""

    # -- producers ---------------------------------------------------------------------------

    def reserve(self) -> Header:
        """The next entry's header, for a producer committing under it (Temporal activities)."""
        return reserve(self.leaf_id, self.effects.now(), self.effects.new_id)

    def producer_stored(self, entry: MessageEntry, *, cancelled: bool = False) -> None:
        """A producer stored ``entry`` under a header from :meth:`reserve`: the message's
        ``message_end`` records it as the receipt, or, should the loop never hand it over, the
        cancellation does. ``cancelled``: the run's cancel arrived meanwhile; it proceeds once
        the receipt is out."""
        key = stored_key(entry.message)
        if key is not None:
            self._stored[key] = entry
        self._cancel_pending = self._cancel_pending or cancelled

    def keep_partial(self, reply: Message) -> None:
        """A cancelled model producer returned ``reply``, its partial message as it cut it
        (``stop_reason="aborted"``): the cancellation stores it instead of the tracked partial."""
        self._cut = reply

    async def commit_batch(self, results: Sequence[Message]) -> None:
        """Store tool results the loop will hand over next, in one append chained from the leaf
        in the given (call) order; each ``message_end`` then records its entry.

        The Temporal executor commits a turn's parallel results this way once all of them are
        in, so append order equals chain order. A batch the store refuses as too large is left to
        the results' own commits, which answer the oversized one with its failure."""
        entries = [self._entry(m) for m in results]
        stamped = stamp(entries, self.leaf_id, self.effects.now(), self.effects.new_id)
        try:
            stored, cancelled = await self._commit(stamped, "persist message")
        except PersistError as exc:
            if too_large(exc.__cause__) is None:
                raise
            return
        for entry in stored.durable:
            assert isinstance(entry, MessageEntry)
            self.producer_stored(entry)
        if cancelled:
            raise asyncio.CancelledError()

    # -- persistence -------------------------------------------------------------------------

    async def persist(self, entries: Sequence[Entry], what: str, keep: bool = False) -> list[Entry]:
        """Stamp and commit one batch; returns its durable copies (the receipt). A store
        failure raises :class:`PersistError` (``what: cause``) and leaves the leaf."""
        now = self.effects.now()
        stamped = stamp(entries, self.leaf_id, now, self.effects.new_id, keep_ids=keep)
        stored, cancelled = await self._commit(stamped, what)
        self._cancel_pending = self._cancel_pending or cancelled
        return self._apply(stored)

    async def _commit(self, stamped: Stamped, what: str) -> tuple[Stamped, bool]:
        """The batch as stored, and whether a cancellation arrived during the write."""
        previous = self.status
        self.status = "persisting"
        try:
            commit, cancelled = await see_through(self.effects.commit(stamped))
        finally:
            self.status = previous
        if commit.cancelled():
            raise asyncio.CancelledError()
        exc = commit.exception()
        if exc is not None:
            if cancelled:
                raise asyncio.CancelledError() from exc  # nothing recorded: cancel from the leaf
            if isinstance(exc, (PersistError, RunActiveError)):  # the latter: ``if_unchanged``
                raise exc
            raise PersistError(f"{what}: {exc}") from exc
        return commit.result(), cancelled

    def record_stored(self, entries: Sequence[Entry]) -> list[Entry]:
        """Record a chained batch a producer stored (approval requests with their reply)."""
        return self._apply(Stamped(list(entries), list(entries), entries[-1].id))

    def _apply(self, stamped: Stamped) -> list[Entry]:
        self.leaf_id = stamped.leaf_id
        self.new_entry_ids.extend(e.id for e in stamped.durable)
        return stamped.durable

    def checkpoint(self) -> None:
        """Raise a cancellation deferred by a commit, now that its receipt is emitted."""
        if self._cancel_pending:
            self._cancel_pending = False
            raise asyncio.CancelledError()

    async def emit_agent(
        self, event: AgentEvent, entries: list[Entry] | None = None, leaf: bool = False
    ) -> None:
        await self.effects.emit(
            Event(
                type="agent",
                session_id=self.session_id,
                agent=event,
                entries=entries,
                leaf_id=self.leaf_id if leaf or entries is not None else None,
            )
        )

    # -- the run -----------------------------------------------------------------------------

    async def run(
        self,
        loop: Loop,
        inputs: Sequence[Entry],
        repairs: Sequence[Entry] = (),
        *,
        resumed: bool = False,
        cancelled: Callable[[BaseException], bool] = lambda _: False,
        shield: bool = True,
        keep_input_ids: bool = False,
        waiting: AwaitingTurn | None = None,
    ) -> list[Message]:
        """The whole run, for both executors: store repairs and input, drive the loop, and on
        cancellation store what the user saw and raise :class:`RunCancelledError`; any other
        failure marks the run ``failed`` and propagates. Returns what ``wait()`` returns.

        The Temporal workflow passes what differs there: ``resumed`` (a continue-as-new
        execution, whose input is stored and whose ``agent_start`` went out), ``cancelled``
        (which other exceptions are the run's cancellation: an activity's) and ``shield=False``
        (the workflow's cancel steps run in its own task: a new task would reorder its
        commands) and ``keep_input_ids`` (inputs keep their client's IDs: persist.stamp).
        ``waiting``: the stored turn whose calls wait for people (no input on such a tail)."""
        try:
            batch, keep = [*repairs, *inputs], keep_input_ids  # its receipt: with agent_start
            receipt = [] if resumed else await self.persist(batch, "persist input", keep)
            await self._drive(loop, inputs, receipt, resumed=resumed, waiting=waiting)
        except Parked:
            self.status = "awaiting_approval"  # parked: a normal end, not a failure
            self._refuse_mail("it parked waiting for approval")
        except asyncio.CancelledError:
            await self._cancel_run(shield)
        except Exception as exc:
            if not cancelled(exc):
                self.status = "failed"
                self._refuse_mail("it failed")
                raise
            await self._cancel_run(shield)
        self._refuse_mail("it has ended")
        return list(self.produced)

    def _refuse_mail(self, because: str) -> None:  # nothing queued is left unanswered
        self.inbox.close(because, RunNotAcceptingError(f"the run ended: {because}"))

    async def _cancel_run(self, shield: bool) -> NoReturn:
        self.inbox.close("it was cancelled")  # takes nothing more; what it holds is stored
        steps = self.cancel()
        await (asyncio.shield(steps) if shield else steps)
        raise RunCancelledError("run cancelled") from None

    async def _drive(
        self,
        loop: Loop,
        inputs: Sequence[Entry],
        receipt: list[Entry],
        *,
        resumed: bool = False,
        waiting: AwaitingTurn | None = None,
    ) -> None:
        """Run ``loop`` on the input messages, storing and emitting as it goes.

        ``resumed`` continues a run whose ``agent_start`` was already emitted (Temporal
        continue-as-new): the loop's own ``agent_start`` is then dropped. ``waiting``: see
        :meth:`run`."""
        messages = [e.message for e in inputs if isinstance(e, MessageEntry)]
        if waiting is not None:
            run = await resume_turn(self, loop, messages, waiting, None if resumed else receipt)
            resumed = True
        else:
            run = loop.run(messages)
        run.inbox = lambda going_on, last=True: approvals.deliver(self, going_on, last)
        started = resumed
        closing = False
        try:
            async for event in run.events():
                if event.type == "agent_start" and resumed:
                    continue
                if not started:
                    started = True
                    first = event if event.type == "agent_start" else AgentEvent(type="agent_start")
                    await self.emit_agent(first, receipt, leaf=True)
                    self.checkpoint()
                    if event.type == "agent_start":
                        continue
                await self._handle(event, run)
            if not started:
                await self.emit_agent(AgentEvent(type="agent_start"), receipt, leaf=True)
                self.checkpoint()
        except GeneratorExit:
            # the coroutine is being closed (a terminated or evicted workflow): it must not
            # await, and the loop's generators are closed along with it
            closing = True
            raise
        finally:
            if not closing:
                await run.aclose()
        self.status = "completed"

    async def _handle(self, event: AgentEvent, run: AgentRun) -> None:
        kind = event.type
        message = event.message
        if kind == "turn_start":
            self.status = "calling_model"
        elif kind in ("message_start", "message_update"):
            if message is not None and message.role == "assistant":
                self._partial = message
        elif kind == "tool_execution_start":
            self.status = "running_tools"
        if kind == "message_end" and message is not None:
            receipt, message = await self._persist_produced(message)
            if message is not event.message:
                event = event.model_copy(update={"message": message})
                run.stored_as(message)  # the model goes on with what the store holds
            self._record(message)
            await self.emit_agent(event, receipt)
            asked = await approvals.record_asked(self)  # before a deferred cancellation
            self.checkpoint()
            if message.role == "assistant":
                await ask_people(self, run, message, asked)
            return
        await self.emit_agent(event)

    async def _persist_produced(self, message: Message) -> tuple[list[Entry], Message]:
        """Store a produced message (or record what its producer stored); a tool result the
        store refuses as too large is answered with ``tool execution failed:
        EntryTooLargeError: …`` instead (the call is never left dangling,
        docs/design.md#repair-and-reconcile) and the run goes on."""
        stored = self._take_stored(message)
        if stored is not None:
            return self._apply(Stamped.stored(stored)), stored.message
        try:
            return await self.persist([self._entry(message)], "persist message"), message
        except PersistError as exc:
            refusal = too_large(exc.__cause__)
            if message.role != "tool_result" or refusal is None:
                raise
            stand_in = error_tool_result_message(
                message.tool_call_id or "",
                message.tool_name or "",
                refusal,
                timestamp=self.effects.now(),
            )
            return await self.persist([self._entry(stand_in)], "persist message"), stand_in

    def _take_stored(self, message: Message) -> MessageEntry | None:
        key = stored_key(message)
        return None if key is None else self._stored.pop(key, None)

    def _entry(self, message: Message) -> MessageEntry:
        # an explicit created_at keeps the default clock out of workflow code (persist restamps)
        return MessageEntry(message=message, created_at=self.effects.now())

    def _record(self, message: Message) -> None:
        self.produced.append(message)
        if message.role == "assistant":
            self._partial = None
            self.turn_count += 1
            if message.usage is not None:
                self.usage = self.usage + message.usage
            self.pending_calls = [c for c in message.tool_calls() if not c.server]
            if self.pending_calls:
                self.status = "running_tools"
        elif message.role == "tool_result":
            for i, call in enumerate(self.pending_calls):
                if call.id == message.tool_call_id:
                    del self.pending_calls[i]
                    break

    # -- cancellation ------------------------------------------------------------------------

    async def _store_message(self, message: Message, stored: MessageEntry | None = None) -> None:
        """Store and emit one message outside the loop (message_start, then its receipt);
        ``stored``: the entry a producer already stored it as."""
        if message.role != "assistant":
            await self.emit_agent(AgentEvent(type="message_start", message=message))
        if stored is None:
            receipt = await self.persist([self._entry(message)], "persist message")
        else:
            receipt = self._apply(Stamped.stored(stored))
        self._record(message)
        await self.emit_agent(AgentEvent(type="message_end", message=message), receipt)

    async def cancel(self) -> None:
        """Store what a cancelled run leaves: the aborted partial reply, a ``tool execution
        cancelled`` result for each unanswered call, then the messages the run accepted (an
        accepted message is always delivered; the next run answers it:
        docs/design.md#approvals-and-steering). Queued decisions are refused. Call it shielded
        from the cancellation.

        What a producer stored that the loop never handed over is recorded as stored instead: a
        reply, or a call's result (the call ran: that is its answer). The partial reply is the
        one its producer cut (:meth:`keep_partial`), else the one tracked here.
        """
        try:
            await self._cancel_answers()
            await approvals.deliver_held(self)
        finally:
            self._refuse_mail("it was cancelled")
        self._cancel_pending = False  # this is the cancellation
        self.status = "cancelled"

    async def _cancel_answers(self) -> None:
        stored, self._stored = self._stored, {}
        reply = stored.pop("", None)
        aborted = reply.message if reply else self._cut or aborted_message(self._partial)
        if aborted is not None:
            await self._store_message(aborted, reply)
        for call in list(self.pending_calls):
            result = stored.get(call.id)
            if result is None:
                cancelled = error_tool_result_message(
                    call.id, call.name, CANCELLED_TEXT, timestamp=self.effects.now()
                )
                await self._store_message(cancelled)
            else:
                await self._store_message(result.message, result)
        self._cut = None
