"""The run engine: one implementation of a durable run, driven by two executors.

The engine owns the whole run (:meth:`RunEngine.run`): it stores the run's input (after the
run-start repair the executor computed with :func:`~durable_agent.session.repair.start_repairs`),
runs the loop, stores every produced message before it emits that message's event (the event is
the entry's **receipt**), marks a failed run, and on cancellation stores what the user saw. A
cancellation that arrives while a commit is in flight waits for the commit, records it and emits
its receipt, and only then proceeds, so the store never holds an entry the run did not record.
All of its side effects go through :class:`RunEffects`: the in-process executor implements them
with the handle's state and an asyncio queue, the Temporal workflow with activities,
``workflow.now()`` and ``workflow.random()``. The engine itself does no I/O and reads no clock,
so it runs unchanged inside a workflow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, NoReturn, Protocol

from ..agent.events import AgentEvent
from ..agent.loop import AgentRun, Loop
from ..agent.tool_exec import failure_text
from ..ai.messages import Message, ToolCall, Usage, error_tool_result_message, with_call_ids
from ..session.entries import Entry, MessageEntry
from ..session.errors import EntryTooLargeError
from .errors import PersistError, RunCancelledError
from .events import Event
from .persist import Stamped, see_through, stamp

__all__ = [
    "CANCELLED_TEXT",
    "RunEffects",
    "RunEngine",
    "RunStatus",
    "aborted_message",
]

CANCELLED_TEXT = "tool execution cancelled"

RunStatus = Literal[
    "starting", "calling_model", "running_tools", "persisting", "completed", "failed", "cancelled"
]


class RunEffects(Protocol):
    """The engine's side effects: a clock, an ID source, a commit and an event sink."""

    def now(self) -> datetime: ...

    def new_id(self) -> str: ...

    async def commit(self, stamped: Stamped) -> None:
        """Store ``stamped.durable`` in one append (and apply it to the handle's state).

        A store error raised from elsewhere (an activity's failure) names the original error
        type in a ``kind`` attribute, so the engine can tell a store refusal it answers (an
        oversized tool result) from one that fails the run."""
        ...

    async def emit(self, event: Event) -> None:
        """Deliver a run event; called only after the entries it names are committed."""
        ...


def aborted_message(partial: Message | None) -> Message | None:
    """A cancelled reply as stored: the partial message minus its unfinished tool call (the last
    block, still streaming when the call stopped), ``stop_reason="aborted"``; ``None`` if nothing
    is left to keep."""
    if partial is None:
        return None
    content = list(partial.content)
    if content and isinstance(content[-1], ToolCall):
        content.pop()
    if not content:
        return None
    return with_call_ids(partial.model_copy(update={"content": content, "stop_reason": "aborted"}))


def _too_large(exc: BaseException | None) -> str | None:
    """``tool execution failed: EntryTooLargeError: …`` if ``exc`` is the store refusing an
    entry as too large: raised here, or reported by a remote commit (see RunEffects.commit)."""
    if isinstance(exc, EntryTooLargeError):
        return failure_text(exc)
    if exc is not None and getattr(exc, "kind", None) == EntryTooLargeError.__name__:
        return f"tool execution failed: {EntryTooLargeError.__name__}: {exc}"
    return None


class RunEngine:
    """Drives one run. Its public attributes are the live state a ``state()`` query reports."""

    def __init__(self, session_id: str, leaf_id: str, effects: RunEffects) -> None:
        self.session_id = session_id
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
        self._reserved: tuple[str, datetime] | None = None
        self._reserved_results: dict[str, tuple[str, datetime]] = {}
        self._landed: dict[str, Message] = {}
        """Tool results a producer committed after the run's cancel was requested, by call ID:
        the cancellation records them (with their receipts) instead of answering the call
        ``cancelled`` beside them."""
        """Headers producers committed the next reply / a call's result under (see
        :meth:`expect_committed`)."""
        self._cancel_pending = False
        """A cancellation that arrived during a commit, raised once that commit's receipt is out."""

    def expect_committed(
        self,
        entry_id: str,
        created_at: datetime,
        tool_call_id: str | None = None,
        *,
        landed: Message | None = None,
    ) -> None:
        """The next assistant reply (or, with ``tool_call_id``, that call's result) was already
        committed by its producer under this header (the Temporal ``call_model`` / ``call_tool``
        activity, SPEC §7.2): the engine records it under the same ID and time, and the effects'
        ``commit`` sees an entry that is already stored.

        ``landed`` is that result when it arrived while the run is being cancelled (the loop
        may never yield it): :meth:`cancel` records it rather than a ``cancelled`` sibling."""
        if tool_call_id is None:
            self._reserved = (entry_id, created_at)
        else:
            self._reserved_results[tool_call_id] = (entry_id, created_at)
            if landed is not None:
                self._landed[tool_call_id] = landed

    # -- persistence -------------------------------------------------------------------------

    async def persist(
        self,
        entries: Sequence[Entry],
        what: str,
        reserved: tuple[str, datetime] | None = None,
    ) -> list[Entry]:
        """Stamp and commit one batch; returns its durable copies (the receipt).

        ``reserved``: the (ID, created_at) a producer already stored a one-entry batch under.
        A store failure raises :class:`PersistError` (``what: cause``) and leaves the leaf.
        """
        if reserved is None:
            stamped = stamp(entries, self.leaf_id, self.effects.now(), self.effects.new_id)
        else:
            entry_id, created_at = reserved
            stamped = stamp(entries, self.leaf_id, created_at, lambda: entry_id)
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
            if isinstance(exc, PersistError):
                raise exc
            raise PersistError(f"{what}: {exc}") from exc
        self.leaf_id = stamped.leaf_id
        self.new_entry_ids.extend(e.id for e in stamped.durable)
        self._cancel_pending = self._cancel_pending or cancelled
        return stamped.durable

    def _checkpoint(self) -> None:
        """Raise a cancellation deferred by :meth:`persist`, now that its receipt is emitted."""
        if self._cancel_pending:
            self._cancel_pending = False
            raise asyncio.CancelledError()

    async def _emit(
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
        aborted: Callable[[], Message | None] = lambda: None,
        cancelled: Callable[[BaseException], bool] = lambda _: False,
        shield: bool = True,
    ) -> list[Message]:
        """The whole run, for both executors: store repairs and input, drive the loop, and on
        cancellation store what the user saw and raise :class:`RunCancelledError`; any other
        failure marks the run ``failed`` and propagates. Returns what ``wait()`` returns.

        The Temporal workflow passes what differs there: ``resumed`` (a continue-as-new
        execution, whose input is stored and whose ``agent_start`` went out), ``aborted`` (the
        reply a cancelled model activity cut itself, see :meth:`cancel`), ``cancelled`` (which
        other exceptions are the run's cancellation: an activity's) and ``shield=False`` (the
        workflow's cancel steps run in its own task: a new task would reorder its commands)."""
        try:
            receipt = [] if resumed else await self.start(inputs, repairs)
            await self.drive(loop, inputs, receipt, resumed=resumed)
        except asyncio.CancelledError:
            await self._cancel_run(aborted(), shield)
        except Exception as exc:
            if not cancelled(exc):
                self.status = "failed"
                raise
            await self._cancel_run(aborted(), shield)
        return list(self.produced)

    async def _cancel_run(self, aborted: Message | None, shield: bool) -> NoReturn:
        steps = self.cancel(aborted)
        await (asyncio.shield(steps) if shield else steps)
        raise RunCancelledError("run cancelled") from None

    async def start(self, inputs: Sequence[Entry], repairs: Sequence[Entry] = ()) -> list[Entry]:
        """Store the pre-model batch (repairs, then input); returns the agent_start receipt."""
        return await self.persist([*repairs, *inputs], "persist input")

    async def drive(
        self,
        loop: Loop,
        inputs: Sequence[Entry],
        receipt: list[Entry],
        *,
        resumed: bool = False,
    ) -> None:
        """Run ``loop`` on the input messages, storing and emitting as it goes.

        ``resumed`` continues a run whose ``agent_start`` was already emitted (Temporal
        continue-as-new): the loop's own ``agent_start`` is then dropped.
        """
        messages = [e.message for e in inputs if isinstance(e, MessageEntry)]
        run = loop.run(messages)
        started = resumed
        closing = False
        try:
            async for event in run.events():
                if event.type == "agent_start" and resumed:
                    continue
                if not started:
                    started = True
                    first = event if event.type == "agent_start" else AgentEvent(type="agent_start")
                    await self._emit(first, receipt, leaf=True)
                    self._checkpoint()
                    if event.type == "agent_start":
                        continue
                await self._handle(event, run)
            if not started:
                await self._emit(AgentEvent(type="agent_start"), receipt, leaf=True)
                self._checkpoint()
        except GeneratorExit:
            # the coroutine is being closed (a terminated or evicted workflow): it must not
            # await, and the loop's generators are closed along with it (issue 11 item 8)
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
            reserved = None
            if message.role == "assistant":
                reserved, self._reserved = self._reserved, None
            elif message.role == "tool_result" and message.tool_call_id:
                reserved = self._reserved_results.pop(message.tool_call_id, None)
                self._landed.pop(message.tool_call_id, None)
            receipt, message = await self._persist_produced(message, reserved)
            if message is not event.message:
                event = event.model_copy(update={"message": message})
                run.stored_as(message)  # the model goes on with what the store holds
            self._record(message)
            await self._emit(event, receipt)
            self._checkpoint()
            return
        await self._emit(event)

    async def _persist_produced(
        self, message: Message, reserved: tuple[str, datetime] | None = None
    ) -> tuple[list[Entry], Message]:
        """Store a produced message; a tool result the store refuses as too large is answered
        with ``tool execution failed: EntryTooLargeError: …`` instead (SPEC §5.3: the call is
        never left dangling) and the run goes on."""
        try:
            entry = self._entry(message)
            return await self.persist([entry], "persist message", reserved), message
        except PersistError as exc:
            refusal = _too_large(exc.__cause__)
            if message.role != "tool_result" or refusal is None:
                raise
            stand_in = error_tool_result_message(
                message.tool_call_id or "",
                message.tool_name or "",
                refusal,
                timestamp=self.effects.now(),
            )
            return await self.persist([self._entry(stand_in)], "persist message"), stand_in

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

    def _aborted(self) -> Message | None:
        return aborted_message(self._partial)

    def _cancelled_result(self, call: ToolCall) -> Message:
        return error_tool_result_message(
            call.id, call.name, CANCELLED_TEXT, timestamp=self.effects.now()
        )

    async def store_message(
        self, message: Message, reserved: tuple[str, datetime] | None = None
    ) -> None:
        """Store and emit one message outside the loop (message_start, then its receipt);
        ``reserved``: the header a producer already stored it under."""
        if message.role != "assistant":
            await self._emit(AgentEvent(type="message_start", message=message))
        receipt = await self.persist([self._entry(message)], "persist message", reserved)
        self._record(message)
        await self._emit(AgentEvent(type="message_end", message=message), receipt)

    async def cancel(self, aborted: Message | None = None) -> None:
        """Store what a cancelled run leaves: the aborted partial reply, then a ``tool execution
        cancelled`` result for each unanswered call. Call it shielded from the cancellation.

        ``aborted``: the reply as its producer already cut it (the Temporal model activity
        returns its own), stored as it is instead of the tracked partial.
        """
        self._reserved = None
        landed = {
            call_id: (message, self._reserved_results[call_id])
            for call_id, message in self._landed.items()
            if call_id in self._reserved_results
        }
        self._reserved_results.clear()
        self._landed.clear()
        if aborted is None:
            aborted = self._aborted()
        if aborted is not None:
            await self.store_message(aborted)
        for call in list(self.pending_calls):
            if call.id in landed:  # the tool ran and its result is stored: that is its answer
                message, reserved = landed[call.id]
                await self.store_message(message, reserved)
            else:
                await self.store_message(self._cancelled_result(call))
        self._cancel_pending = False  # this is the cancellation
        self.status = "cancelled"
