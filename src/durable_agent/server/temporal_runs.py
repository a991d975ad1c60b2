"""Runs as workflows on the workers of a task queue: :class:`TemporalRuns`.

Any server process finds any run: the runs of a session are listed with a visibility query on
the session's search attributes (which may lag about a second) and described one by one, so
replicas share no memory; a run this process started is relayed to its session's streams from
the run's own event stream (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from ..activities.run_contracts import RunState
from ..durable.agent import new
from ..durable.inbox import When
from ..durable.stream import RunStream
from ..session.approvals import ApprovalDecision
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.ids import new_id
from ..session.store import Store
from ..workflows.executor import TemporalExecutor, run_workflow_id, send_body
from ..workflows.mail_client import execute_update, worker_within
from ..workflows.purge import delete_session_workflows
from ..workflows.run_mail import SendBody
from ..workflows.search import (
    Creation,
    creation_when_asked,
    latest_runs,
    running_executions,
    running_runs,
)
from ..workflows.worker_logs import in_one_line
from .deciding import SessionLocks, decide_at_leaf
from .relay import RunRelay
from .runs import (
    Accepted,
    OnBusy,
    RunEnd,
    RunFailure,
    RunListener,
    RunNotFoundError,
    Status,
    cancel_each,
    made_for_start,
    no_run_accepts,
    open_at,
    pick_agent,
    refuse_busy,
)
from .temporal_ends import Ends, described, description, ended, failure_in_history

__all__ = ["TemporalRuns"]

logger = logging.getLogger("durable_agent.server")

END_QUERY_TIMEOUT = 10.0
"""Seconds the ``state()`` query naming a failed or cancelled run's last entry may take."""
LATELY = 5
"""How many of a session's latest ended runs a message with a client's ID is offered to first:
the one that took it before its answer was lost answers it again (``TemporalRuns.send``)."""
UPDATE_WAIT = 10.0
"""Seconds a decision or a message waits for a worker to take it before its request answers 503."""


class TemporalRuns:
    """Run workflows on the workers of ``task_queue``; any replica finds any run."""

    local = False

    def __init__(
        self,
        client: Client,
        task_queue: str,
        store: Store,
        listener: RunListener,
        agents: Sequence[str] = (),
        update_wait: float = UPDATE_WAIT,
    ) -> None:
        self.client = client
        self.listener = listener
        self.store = store
        self.agents = list(agents)
        self.executor = TemporalExecutor(client, task_queue=task_queue)
        self.executor.update_wait = update_wait  # bounds decisions (messages: ``_offer``)
        self._streams: dict[tuple[str, str], RunStream] = {}
        self._relays: dict[tuple[str, str], RunRelay] = {}
        self._born: dict[tuple[str, str], datetime | None] = {}
        """The ``created_at`` of the session each run this process follows started in."""
        self._accepted = Accepted()
        self.ends = Ends(client)
        self._tasks: set[asyncio.Task[None]] = set()
        self._locks = SessionLocks()
        self._deciding = SessionLocks()

    async def start(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        leaf_id: str | None,
        agent: str | None,
        on_busy: OnBusy,
        run_id: str | None = None,
    ) -> str:
        name = self.agent(agent)
        async with self._locks(session_id):
            if run_id is not None and await self.has(session_id, run_id):
                return run_id  # a retried start: that run, nothing new
            refuse_busy(session_id, await self.active(session_id), on_busy)
            async with made_for_start(self.store, session_id):
                handle = await new(
                    name, store=self.store, session_id=session_id, executor=self.executor
                )
                await open_at(handle, leaf_id)
                # a start of the same ID through another server meanwhile: the workflow ID is
                # taken, and this follows that run (it never starts twice)
                run_id = run_id or new_id()
                stream = await handle.run(*entries, run_id=run_id, if_unchanged=on_busy == "reject")
            born = handle.state.born  # the creation its start read (for its memo)
        # the stream follows the run in the store until it ends; kept until then, so the busy
        # check sees the run before visibility does. Its events, the run's own, reach the
        # session's streams (its live text keyed by the run's own leaf: sibling runs never mix);
        # its live text is read only while a stream follows the session (a hub lingers a few
        # seconds after its last browser): without one, only its receipts
        stream.live_wanted = lambda: self.listener.watched(session_id)
        key = (session_id, run_id)
        self._streams[key] = stream
        self._born[key] = born
        stream.when_done(lambda: self._forget(self._streams, key))
        stream.when_done(lambda: self._forget(self._born, key))
        relay = self._relays[key] = RunRelay(self.listener, handle, stream, run_id)
        self.listener.run_status(session_id, run_id, relay.status)
        task = asyncio.create_task(self._relay(session_id, run_id, relay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run_id

    def agent(self, name: str | None) -> str:
        return pick_agent(self.agents, name)

    async def _relay(self, session_id: str, run_id: str, relay: RunRelay) -> None:
        """Relay the run; then tell its end with its last entry by its own account, a failure
        with why by that account too (kept: ``failure``), else as the run's stream raised it."""
        status, last = await relay.run()
        failure = None if relay.error is None else RunFailure.of(relay.error)
        with contextlib.suppress(Exception):  # its failure kept as Temporal told it: failure()
            status, last, failure = await self.outcome(session_id, run_id)
        self._forget(self._relays, (session_id, run_id))
        self.listener.run_status(session_id, run_id, status, last, failure)

    async def aclose(self) -> None:
        """Stop relaying and following the runs (they go on, on their workers): no task of
        this server outlives it. The relays first: a stream detached under its relay would
        read as the run's end."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for stream in list(self._streams.values()):
            await stream.detach()

    @staticmethod
    def _forget(runs: dict[tuple[str, str], Any], key: tuple[str, str]) -> None:
        runs.pop(key, None)

    def relayed(self, session_id: str, run_id: str) -> Status | None:
        relay = self._relays.get((session_id, run_id))
        return None if relay is None else relay.status

    async def cancel(self, session_id: str, run_id: str) -> None:
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        try:
            await handle.cancel()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None
            raise

    async def active(self, session_id: str) -> list[str]:
        return list(await self.going(session_id))

    async def going(self, session_id: str, *, born: datetime | None = None) -> dict[str, str]:
        """The session's runs going, any server's, each with its execution going as listed
        (``""``: one this process started, not listed yet); not those of a session of its ID
        deleted before it was created again, or before (docs/design.md#retention). ``born``:
        the session's ``created_at`` if the caller has it (a hub's), else read when needed."""
        if born is None:
            return await self._going(session_id, creation_when_asked(self.store, session_id))

        async def known() -> datetime | None:
            return born

        return await self._going(session_id, known)

    async def _going(self, session_id: str, born: Creation) -> dict[str, str]:
        """:meth:`going`, the record read only once a run names a creation (most have none)."""
        found = await running_executions(self.client, session_id, born)
        mine = {
            r: ""
            for (s, r) in self._streams
            if s == session_id and r not in found and self._born.get((s, r)) == await born()
        }
        return mine | found

    async def session_deleted(self, session_id: str, run_ids: Sequence[str]) -> None:
        """Cancel the session's runs, then delete its workflows' histories in the background
        (each running one given a few seconds to end first: :mod:`..workflows.purge`)."""
        known = list(run_ids)
        try:
            known += [r for s, r in self._streams if s == session_id]  # every creation's
            known += await running_runs(self.client, session_id)
        except Exception as exc:  # best effort: the runs fail at their next commit anyway
            logger.warning("listing the runs of deleted %s: %s", session_id, in_one_line(exc))
        await cancel_each(self, session_id, known)
        self._accepted.forget(session_id)
        self.ends.forget(session_id)
        task = asyncio.create_task(self._purge(session_id, known))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _purge(self, session_id: str, run_ids: Sequence[str]) -> None:
        try:
            await delete_session_workflows(self.client, session_id, run_ids=run_ids)
        except Exception as exc:  # an outage, not a bug: one line, as the server logs a 503
            logger.warning("deleting the workflows of deleted %s: %s", session_id, in_one_line(exc))

    async def status(self, session_id: str, run_id: str) -> Status:
        """What the run does now: as Temporal describes it, a running run asked once whether it
        waits for people (docs/design.md#http-api). Not what this server relays: that follows
        the run's events, which may trail its state by a moment."""
        status, execution = await description(self.client, session_id, run_id)
        self.ends.current(session_id, run_id, execution)  # not a reset execution's
        if status != "started":
            return status
        try:
            async with asyncio.timeout(END_QUERY_TIMEOUT):
                state = await self.state(session_id, run_id)
        except Exception as exc:  # no worker to answer: what Temporal says is all there is
            logger.info("the state of run %s: %s", run_id, type(exc).__name__)
            return status
        return "awaiting_approval" if state.status == "awaiting_approval" else status

    async def has(self, session_id: str, run_id: str) -> bool:
        """A run of the session that Temporal knows (any server's; ended ones until the
        namespace's retention removes them)."""
        if (session_id, run_id) in self._streams:
            return True
        try:
            await described(self.client, session_id, run_id)
        except RunNotFoundError:
            return False
        return True

    async def failure(self, session_id: str, run_id: str) -> RunFailure | None:
        """As this process learnt it at the run's end if it followed the run there (a loaded
        Temporal may not answer the read of its history in time), else from that history."""
        known = self.ends.failure(session_id, run_id)
        return known or await failure_in_history(self.client, session_id, run_id)

    async def outcome(self, session_id: str, run_id: str) -> RunEnd:
        """Wait for the run's end (:func:`.temporal_ends.ended`: never a broken long poll nor an
        outage); say how it ended, the ID of the last entry it stored (from its result; for a
        failed or cancelled run, from one ``state()`` query of the closed run; ``""`` when that
        cannot be had) and, for a failed run, why."""
        status, result, failure, execution = await ended(self.client, session_id, run_id)
        self.ends.keep(session_id, run_id, execution, failure)
        if result is not None:
            return status, result.new_entry_ids[-1] if result.new_entry_ids else "", None
        try:
            async with asyncio.timeout(END_QUERY_TIMEOUT):
                state = await self.state(session_id, run_id)
        except Exception as unread:  # a closed run no worker can replay now, say
            logger.info("the entries of ended run %s: %s", run_id, type(unread).__name__)
            return status, "", failure
        return status, state.new_entry_ids[-1] if state.new_entry_ids else "", failure

    async def state(self, session_id: str, run_id: str) -> RunState:
        """The run's ``state()``: asked once when a stream attaches to a run it did not see start
        (its turn count keys the reply's live deltas)."""
        return await self.executor.state(session_id, run_id)

    async def send(
        self, session_id: str, entry: MessageEntry, when: When, message_id: str | None = None
    ) -> tuple[str, str]:
        """The ``send`` update of the session's running run, answered once its validator
        accepted the message (delivery comes later, a receipt on the stream)."""
        creation = creation_when_asked(self.store, session_id)
        born = await creation()  # read once for every check below
        accepted = self._accepted.run_of(session_id, message_id, born)
        if accepted is not None and message_id is not None:
            return accepted, message_id  # a retried request: handed on once
        resent = message_id is not None  # the client's ID: maybe a resend
        message_id = message_id or new_id()
        # the update's ID: the same message sent again is the same update, which a run answers
        # once, going or ended (Temporal keeps a run's update IDs with its history)
        body = send_body(entry, when).model_copy(
            update={"message_id": message_id, "answer": "accepted"}
        )
        # a resend is offered first to the runs that ended lately, all at once: one that took
        # it before its answer was lost says so, and a run started since never takes it again
        going, latest = await asyncio.gather(
            self._going(session_id, creation),
            self._latest(session_id, born, resent),
        )
        ended = [r for r in latest if r not in going]
        offers = [self._offer(session_id, r, body, message_id, born) for r in ended]
        for run_id, took in zip(ended, await asyncio.gather(*offers), strict=True):
            if took:
                return run_id, message_id
        for run_id in going:
            if await self._offer(session_id, run_id, body, message_id, born):
                return run_id, message_id
        raise no_run_accepts(session_id)

    async def _offer(
        self, session_id: str, run_id: str, body: SendBody, message_id: str, born: datetime | None
    ) -> bool:
        """Whether the run took the message: its validator accepted the update (answered in the
        workflow task that queues it, not when the run delivers it), or the run, ended, took
        this very update before."""
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        try:
            async with worker_within(self.executor.update_wait, "message", message_id):
                await execute_update(handle, "send", body, message_id)
        except (WorkflowUpdateFailedError, RPCError):
            return False  # that run ended or takes no more messages
        self._accepted.add(session_id, message_id, run_id, born)
        return True

    async def _latest(self, session_id: str, born: datetime | None, resent: bool) -> list[str]:
        """The session's latest runs, going or ended: one that ended may have taken the message
        being sent again (not one of a session of the ID deleted since: ``latest_runs``)."""
        if not resent:
            return []
        try:
            return await latest_runs(self.client, session_id, born, LATELY)
        except RPCError as exc:
            logger.info("listing the runs of %s: %s", session_id, type(exc).__name__)
            return []

    async def decide(self, session_id: str, decision: ApprovalDecision) -> tuple[Entry, str | None]:
        """Any server process decides from the session ID alone: the run that asked takes the
        decision through its ``decide`` update, else it is committed at the session's leaf
        (one at a time: :func:`.deciding.decide_at_leaf`; a run carries out the turn's calls
        once all are decided)."""
        name = self.agents[0] if self.agents else "agent"  # this handle only decides
        opened = partial(
            new, name, store=self.store, session_id=session_id, executor=self.executor, create=False
        )
        return await decide_at_leaf(self, self.store, self._deciding, session_id, decision, opened)

    async def compact(
        self, session_id: str, keep_turns: int, *, leaf_id: str | None, agent: str | None
    ) -> CompactionEntry | None:
        """The compaction workflow on the queue's workers, as ``agent.compact`` does there. A
        run start on this replica waits for it; one on another replica is not held back."""
        name = pick_agent(self.agents, agent)
        async with self._locks(session_id):
            refuse_busy(session_id, await self.active(session_id), "reject")
            handle = await new(
                name, store=self.store, session_id=session_id, executor=self.executor, create=False
            )
            await open_at(handle, leaf_id)
            entry = await handle.compact(keep_turns)
        self.listener.stored(session_id)
        return entry
