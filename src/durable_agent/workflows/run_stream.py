"""The client side of one run on Temporal: the run stream a handle reads.

:class:`RunFollower` follows the run's session in the store (a
:class:`~durable_agent.durable.follow.SessionFollower`), derives the run's events from the
entries it stored (:class:`~durable_agent.durable.chain_events.RunChain`), applies each receipt to
the handle as it arrives, read or not, and puts a reply's live deltas before its ``message_end``
(docs/design.md#receipts, docs/design.md#live-deltas). The run's end comes from its result (a
long poll, not billed); the workflow is never queried, so a run costs the same Temporal actions
whatever its model's latency. A stream that broke leaves the handle busy until the run ended and
then re-syncs it from the store; a run that failed hands the entries it may have stored to the
handle's next run start (:mod:`.stream_recovery`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TerminatedError,
    TimeoutError,
)

from ..activities.failures import agent_error, unsettled_ids
from ..activities.run_contracts import RunResult
from ..agent.events import AgentEvent
from ..ai.messages import Message
from ..durable.chain_events import RunChain
from ..durable.errors import AgentError, RunCancelledError
from ..durable.events import Event
from ..durable.follow import DeltaFollower, SessionFollower
from ..durable.partial import copied
from ..durable.state import SessionState
from ..session.deltas import DeltaChannel
from ..session.errors import StoreUnavailableError
from ..session.store import entries_after
from .outages import through_outages
from .run_start import RunStart
from .stream_recovery import resync, scheduled_entry_ids

__all__ = ["RunFollower", "client_error"]

logger = logging.getLogger("durable_agent.temporal")


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


FIRST_READ = 0.1
"""Seconds from the run's start to the first read of its session."""
FASTEST_READ = 0.1
"""Seconds to the next read of the session after one that found entries, or after a reply's
last delta woke the reader (its entry is being stored as the delta is written)."""
SLOWEST_READ = 1.0
"""Seconds between two reads of the session at most while the run goes on (a read with nothing
new costs a FileStore one ``stat``); a reply's deltas, its last above all, hurry the next."""
TOOL_READ = 0.25
"""Seconds between two reads of the session at most while the run's tools run: a tool's result
(and the next reply's start, which waits for it) shows within this of being stored, at four
reads a second while a tool works, where an idle wait grows to ``SLOWEST_READ``."""
SLACK = 0.05
"""Seconds within which a read that is due soon is done on the current wake-up."""
CATCH_UP_WITHIN = 5.0
"""Seconds a stream reads on after its run ended for the entries its result names that no
read brought (a store down as the run ended), before it re-syncs the handle."""
UNREAD_PACE = 1.0
"""Seconds between two reads of the session while nobody reads the events (``wait()`` only):
the receipts still reach the handle as the run goes, at one read a second, and the run's end
brings the rest at once."""


class RunFollower:
    """Follows one run workflow for one handle (see the module docstring); :meth:`produce` is
    the producer of the handle's ``LocalRunStream``. ``reading`` says whether anyone reads the
    events (without a reader, live deltas are not read at all)."""

    def __init__(
        self,
        client: Client,
        state: SessionState,
        handle: WorkflowHandle[Any, RunResult],
        start: RunStart,
        channel: DeltaChannel | None,
        run_id: str,
        reading: Callable[[], bool],
    ) -> None:
        self.client = client
        self.state = state
        self.handle = handle
        self.chain = RunChain(
            state.session_id, start.leaf, start.inputs, start.repairs, start.waiting
        )
        self.entries = SessionFollower(
            state.store,
            state.session_id,
            start.after,
            fastest=FASTEST_READ,
            slowest=SLOWEST_READ,
            missing_ok=True,  # a new session's first run creates it
            on_wake=self._pushed,
            born=start.born,
        )
        self._after = start.after
        self.deltas = None if channel is None else DeltaFollower(channel, state.session_id, run_id)
        self.reading = reading
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._quick = False
        """The current nap's timer reads the streaming reply's deltas itself (:meth:`_tick`)."""
        self._put: Callable[[Event], None] = lambda _: None
        self._result: asyncio.Future[RunResult] | None = None
        self._agent_event = Event.model_construct(type="agent", session_id=state.session_id)
        self._first_update: AgentEvent | None = None
        """A reply's first live update while the store is read before it goes out."""

    async def produce(self, put: Callable[[Event], None]) -> list[Message]:
        state, handle = self.state, self.handle
        # the run goes on in Temporal through an outage: its stream waits it out
        waited = f"the run stream of {handle.id}"
        result_task = asyncio.ensure_future(through_outages(handle.result, waited, logger))
        result_task.add_done_callback(lambda _: self._pushed())
        self._put, self._result = put, result_task
        # the run stores its input in its first workflow task, a round trip or two after its
        # start: a read at once would find nothing (and cost a wake-up), one 0.1 s on finds it
        self.entries.defer(FIRST_READ)
        try:
            try:
                await self._deliver(self.chain.begin(), put)
                await self._follow(result_task, put)
            except Exception:
                # The stream broke (a store read failed for good) while the run may go on: the
                # handle stays busy until the run ends, then takes its log and leaf from the
                # store, so no second run branches from a stale leaf.
                try:
                    await resync(state, handle, result_task)
                except Exception:
                    logger.exception("could not re-sync %s after its stream broke", handle.id)
                raise
            try:
                result = await result_task
            except WorkflowFailureError as exc:
                error = client_error(exc)
                cancelled = isinstance(error, RunCancelledError)
                await self._deliver(self.chain.end("cancelled" if cancelled else "failed"), put)
                # writes the run scheduled may land after it ended: the next run start
                # reconciles them with the store (docs/design.md#repair-and-reconcile)
                ids = await scheduled_entry_ids(self.client, handle.id)
                ids += unsettled_ids(exc.cause)  # local appends: named by the failure
                state.unsettled.extend(i for i in ids if i not in state.index)
                raise error from error.__cause__ or exc  # a store outage: as in process
            wanted = list(result.new_entry_ids)
            if self.chain.ids != wanted:
                await self._catch_up(wanted, put)
            if self.chain.ids != wanted:
                # another writer's entry fit the run's chain, or the store stayed down: the
                # run's own account wins for the handle (docs/design.md#receipts)
                logger.warning("the run stream of %s followed another chain", handle.id)
                await resync(state, handle, result_task)
            parked = result.status == "awaiting_approval"
            await self._deliver(
                self.chain.end("parked" if parked else "completed", result.usage), put
            )
            return list(self.chain.produced)
        finally:
            self.entries.close()
            if not result_task.done():  # its long poll ends with the stream (a detach)
                result_task.cancel()
                await asyncio.wait({result_task})

    async def _catch_up(self, wanted: list[str], put: Callable[[Event], None]) -> None:
        """The run's own account names entries no read brought (a read failed as the run
        ended): read the session from the run's start, those not read yet, until they come
        or ``CATCH_UP_WITHIN`` seconds passed, each read with its events."""
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + CATCH_UP_WITHIN, FASTEST_READ
        while True:
            try:
                found = await entries_after(self.state.store, self.state.session_id, self._after)
            except StoreUnavailableError as exc:
                logger.debug("catching up with %s: %s", self.handle.id, exc)
                found = []
            unread = (e for _, e in found if not self.entries.has_read(e.id))
            await self._deliver(self.chain.add(unread), put)
            ids = self.chain.ids
            if ids == wanted or ids != wanted[: len(ids)] or loop.time() + delay > deadline:
                return  # all read; or another entry fit the chain (no read mends that)
            await asyncio.sleep(delay)
            delay = min(delay * 2, SLOWEST_READ)

    async def _follow(
        self, result_task: asyncio.Future[RunResult], put: Callable[[Event], None]
    ) -> None:
        """Read the session (and the streaming reply's deltas) until the run ended and every
        entry it stored before ending was read. Every wait is a wake-up of the event loop, which
        is what following a run costs the client: reads due within ``SLACK`` of each other share
        one, and while a reply streams only its deltas pace the loop (its last delta wakes the
        store's reader)."""
        entries, deltas = self.entries, self.deltas
        while True:
            ended = result_task.done()
            if ended and self._read_all(result_task):
                return  # the run's own account names no entry this has not read
            reading = self.reading()
            turn = self.chain.reply_turn
            following = deltas is not None and turn is not None and reading
            if following:
                assert deltas is not None and turn is not None
                deltas.expect(turn)
                if deltas.due_in() <= SLACK:
                    await self._update(deltas, put)
            streaming = following and deltas is not None and deltas.busy
            if ended or self._store_in(reading, streaming) <= SLACK:
                found = await entries.read()
                await self._deliver(self.chain.add(e for _, e in found), put)
                if ended:
                    return  # everything the run stored was stored before it ended
                continue  # the run moved on: what it awaits now may have changed
            wait = self._store_in(reading, streaming)
            quick = False
            if following:
                assert deltas is not None
                wait = min(wait, deltas.due_in())
                quick = deltas.immediate and not self.chain.reply_unshown
            await self._nap(result_task, wait, quick)

    async def _nap(
        self, result_task: asyncio.Future[RunResult], wait: float, quick: bool = False
    ) -> None:
        """Wait ``wait`` seconds (``inf``: for ever) or until the run ends, with one future and
        one timer (``asyncio.wait`` builds and tears down more around each of these wake-ups, a
        few a second while a reply streams). ``quick``: the timer reads the streaming reply's
        deltas itself (:meth:`_tick`), so the task sleeps on until something else is due."""
        if result_task.done():
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._quick = quick
        self._arm(wait)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self, wait: float) -> None:
        if wait != float("inf"):
            self._timer = asyncio.get_running_loop().call_later(wait, self._tick)

    def _tick(self) -> None:
        """A nap's timer: wake the task, or (``quick``) read the reply's deltas right here and
        nap on. A read of a streaming reply's deltas is what a streaming run's client does a
        few times a second, and after a wait every line of code it runs is slow (cold caches),
        so the read skips the task's wake-up, the follow loop and a turn of the event loop."""
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            wait = self._read_quickly() if self._quick else None
        except Exception as exc:  # the task raises it, as if it had read
            waiter.set_exception(exc)
            return
        if wait is None:
            waiter.set_result(None)
        else:
            self._arm(wait)

    def _read_quickly(self) -> float | None:
        """What :meth:`_follow` does on a wake-up of a quick nap when only the deltas' read is
        due (the chain cannot have moved: only the task reads the store): read them, put their
        update, and say how long to nap on; ``None`` wakes the task (the run ended, the reply's
        last delta was read, the store's read is due)."""
        deltas = self.deltas
        assert deltas is not None
        if (self._result is not None and self._result.done()) or deltas.due_in() > SLACK:
            return None
        update = deltas.poll_now()
        if update is not None:
            self._put(self._wrap(update))
            if deltas.final:
                self.entries.wake()
                return None
        store_in = self._store_in(True, deltas.busy)
        return None if store_in <= SLACK else min(store_in, deltas.due_in())

    def _pushed(self) -> None:
        """Wake the follow loop: the run ended, or the store's feed says the session grew."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _read_all(self, result_task: asyncio.Future[RunResult]) -> bool:
        """The run ended well and every entry its result names was read already: the read
        that would make sure of it is not needed."""
        if result_task.cancelled() or result_task.exception() is not None:
            return False
        return self.chain.ids == list(result_task.result().new_entry_ids)

    def _store_in(self, reading: bool, streaming: bool) -> float:
        """Seconds until the session is due to be read: at once when woken; while a reply
        streams, when its last delta wakes it; without a reader of the events, at most once
        per ``UNREAD_PACE``."""
        entries = self.entries
        if entries.woken:
            return 0.0
        if streaming:
            return float("inf")
        entries.slowest = TOOL_READ if reading and self.chain.tools_running else SLOWEST_READ
        due = entries.due_in()
        if not reading:
            since = asyncio.get_running_loop().time() - entries.read_at
            due = max(due, UNREAD_PACE - since)
        return due

    async def _update(self, deltas: DeltaFollower, put: Callable[[Event], None]) -> None:
        """One read of the streaming reply's deltas; its last one hurries the next store read
        (the reply's entry is being stored)."""
        update = await deltas.poll()
        if update is None:
            return
        if self.chain.reply_unshown:
            # The reply's first sign. The run stored what came before its model call (a message
            # sent into it) before this delta was written: one read puts that first, as the
            # engine records it. If the read brings the reply's entry, the update goes out
            # just before its receipt (see _deliver).
            self._first_update = update
            found = await self.entries.read()
            await self._deliver(self.chain.add(e for _, e in found), put)
            update, self._first_update = self._first_update, None
            if update is None:
                return
        for event in self.chain.reply_started():
            put(event)
        put(self._wrap(update))
        if deltas.final:
            self.entries.wake()

    async def _deliver(self, events: list[Event], put: Callable[[Event], None]) -> None:
        """Apply and put derived events; a reply's last live updates go before its receipt."""
        for event in events:
            inner = event.agent
            assert inner is not None
            reply = inner.message if inner.type == "message_end" else None
            if reply is not None and reply.role == "assistant" and self.deltas is not None:
                if self._first_update is not None:
                    put(self._wrap(self._first_update))
                    self._first_update = None
                for update in await self.deltas.finish(reply):
                    put(self._wrap(update))
            if event.entries is not None and event.leaf_id is not None:
                self.state.apply_receipt(event.entries, event.leaf_id)
            put(event)

    def _wrap(self, inner: AgentEvent) -> Event:
        # copied unvalidated: a live update, a few a second, of fields already of their types
        return copied(self._agent_event, {"agent": inner})
