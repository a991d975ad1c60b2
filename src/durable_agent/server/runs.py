"""Starting, cancelling and finding the runs of a session: in this process, or on Temporal.

:class:`LocalRuns` runs agents in the server process (``create_app(agents=...)``, for development:
its runs live and die with the process). :class:`TemporalRuns` starts run workflows on the
workers of a task queue, and finds the runs of a session that any server process started with a
visibility query on the session's search attributes (which may lag about a second), so replicas
share no memory (docs/design.md#http-api).

Both tell a :class:`RunListener` (the session streams) what the server learns of a run: its
status, and for a run in this process its live text; a Temporal run's text is read from the
store's live-delta channel by the stream itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from ..activities.run_contracts import RunResult, RunState
from ..durable.agent import Agent, new
from ..durable.errors import (
    AgentError,
    RunActiveError,
    RunNotAcceptingError,
    UnknownAgentError,
)
from ..durable.inbox import When
from ..durable.stream import RunStream
from ..session.approvals import ApprovalDecision, awaiting_turn
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.errors import SessionExistsError
from ..session.ids import new_id
from ..session.store import Store
from ..session.tree import path
from ..workflows.executor import TemporalExecutor, run_workflow_id, send_body
from ..workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE
from .relay import RunRelay

__all__ = [
    "REMEMBERED",
    "OnBusy",
    "RunListener",
    "RunNotFoundError",
    "Runs",
    "RunsUnavailableError",
    "Status",
    "TemporalRuns",
    "continue_settled",
    "no_run_accepts",
    "open_at",
    "pick_agent",
    "refuse_busy",
    "run_active",
]

logger = logging.getLogger("durable_agent.server")

OnBusy = Literal["reject", "next_turn", "at_end", "sibling"]
Status = Literal["started", "awaiting_approval", "completed", "failed", "cancelled"]


REMEMBERED = 10_000
"""How many ended runs a process remembers the outcome of (the oldest forgotten first)."""
END_QUERY_TIMEOUT = 10.0
"""Seconds the ``state()`` query naming a failed or cancelled run's last entry may take."""


class RunNotFoundError(AgentError, LookupError):
    """No run of that ID in that session (or not one this server can see)."""


class RunsUnavailableError(AgentError):
    """The server has neither agents in process nor a Temporal connection: it only reads."""


def run_active(session_id: str, run_id: str) -> RunActiveError:
    """The 409 of a busy session, naming the active run."""
    error = RunActiveError(f"session {session_id!r} has an active run {run_id!r}")
    error.run_id = run_id  # type: ignore[attr-defined]
    return error


class RunListener(Protocol):
    """What the session streams hear from the runs of this process."""

    def run_status(
        self, session_id: str, run_id: str, status: Status, last_entry: str = ""
    ) -> None:
        """The run's status changed; for an end, ``last_entry`` is the ID of the last entry
        the run stored (``""``: none, or not known), which the streams show before the end."""

    def run_delta(
        self, session_id: str, run_id: str, entry_parent: str, text: str, restart: bool
    ) -> None: ...

    def stored(self, session_id: str) -> None:
        """The run stored entries: read the session now."""


class Runs(Protocol):
    """Where a server's runs go."""

    local: bool
    """Runs in this process (their live text comes from :class:`RunListener` calls)."""

    async def start(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        leaf_id: str | None,
        agent: str | None,
        on_busy: OnBusy,
    ) -> str: ...

    async def cancel(self, session_id: str, run_id: str) -> None: ...

    async def active(self, session_id: str) -> list[str]:
        """The IDs of the session's runs still going."""
        ...

    async def status(self, session_id: str, run_id: str) -> Status: ...

    def relayed(self, session_id: str, run_id: str) -> Status | None:
        """The status of a run this process relays to the streams (:class:`~.relay.RunRelay`:
        one it started), else ``None``."""
        ...

    async def send(self, session_id: str, entry: MessageEntry, when: When) -> tuple[str, str]:
        """Hand ``entry`` to the session's running run: ``(run_id, message_id)`` once a run
        accepted it, else :class:`RunNotAcceptingError`."""
        ...

    async def decide(self, session_id: str, decision: ApprovalDecision) -> Entry:
        """Decide a pending call of the session; the stored decision entry."""
        ...

    async def compact(
        self, session_id: str, keep_turns: int, *, leaf_id: str | None, agent: str | None
    ) -> CompactionEntry | None:
        """Compact the session's path (to its last entry, or ``leaf_id``) with ``agent``'s
        model; the stored entry, ``None`` when there was nothing to compact.
        :class:`RunActiveError` while a run goes."""
        ...


def no_run_accepts(session_id: str) -> RunNotAcceptingError:
    return RunNotAcceptingError(
        f"no run of session {session_id!r} takes a message now: start a run with it"
    )


async def decide_with(handle: Agent, decision: ApprovalDecision) -> Entry:
    return await handle.decide(
        decision.tool_call_id,
        decision.approved,
        reason=decision.reason,
        args=decision.args,
        decided_by=decision.decided_by,
    )


async def continue_settled(runs: Runs, store: Store, session_id: str) -> str | None:
    """After a decision no run took (the run that asked parked, ended or lives elsewhere): when
    every call of the waiting turn is decided and nothing runs, start the run that carries the
    calls out, as ``durable-agent approve`` does; its ID, else ``None``. With several agents
    the server cannot tell which one asked, and leaves it to the next run."""
    if await runs.active(session_id):
        return None
    entries = await store.load_entries(session_id)
    turn = awaiting_turn(path(entries, entries[-1].id)) if entries else None
    if turn is None or turn.undecided():
        return None
    with contextlib.suppress(UnknownAgentError, RunActiveError):
        return await runs.start(session_id, [], leaf_id=None, agent=None, on_busy="reject")
    return None


def pick_agent(names: Sequence[str], agent: str | None) -> str:
    if agent is None:
        if len(names) == 1:
            return names[0]
        raise UnknownAgentError("name the agent: this server has " + (", ".join(names) or "none"))
    if names and agent not in names:
        raise UnknownAgentError(f"no agent {agent!r} on this server")
    return agent


async def _create(store: Store, session_id: str) -> None:
    """The session of a run starts to exist with the run's request (a stream may follow it at
    once), like ``new()``: created if absent."""
    with contextlib.suppress(SessionExistsError):
        await store.create_session(session_id)


async def open_at(agent: Agent, leaf_id: str | None) -> Agent:
    if leaf_id is not None and leaf_id != agent.leaf_id:
        await agent.branch(leaf_id)
    return agent


def refuse_busy(session_id: str, active: list[str], on_busy: OnBusy) -> None:
    """``sibling`` runs beside the active run; anything else is refused while one goes (the
    run routes deliver ``next_turn``/``at_end`` into the active run before they get here)."""
    if active and on_busy != "sibling":
        raise run_active(session_id, active[0])


_STATUS: dict[WorkflowExecutionStatus, Status] = {
    WorkflowExecutionStatus.RUNNING: "started",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "started",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


def _run_id(workflow_id: str) -> str:
    """``durable-agent/<session>/run/<run_id>`` -> ``<run_id>``."""
    return workflow_id.rsplit("/", 1)[-1]


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
    ) -> None:
        self.client = client
        self.listener = listener
        self.store = store
        self.agents = list(agents)
        self.executor = TemporalExecutor(client, task_queue=task_queue)
        self._streams: dict[tuple[str, str], RunStream] = {}
        self._relays: dict[tuple[str, str], RunRelay] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def start(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        leaf_id: str | None,
        agent: str | None,
        on_busy: OnBusy,
    ) -> str:
        name = pick_agent(self.agents, agent)
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            refuse_busy(session_id, await self.active(session_id), on_busy)
            await _create(self.store, session_id)
            handle = await new(
                name, store=self.store, session_id=session_id, executor=self.executor
            )
            await open_at(handle, leaf_id)
            run_id = new_id()
            stream = await handle.run(*entries, run_id=run_id)
        # the stream follows the run in the store until it ends; kept until then, so the busy
        # check sees the run before visibility does. Its events, the run's own, reach the
        # session's streams (its live text keyed by the run's own leaf: sibling runs never mix)
        key = (session_id, run_id)
        self._streams[key] = stream
        stream.when_done(lambda: self._forget(self._streams, key))
        relay = self._relays[key] = RunRelay(self.listener, handle, stream, run_id)
        self.listener.run_status(session_id, run_id, "started")
        task = asyncio.create_task(self._relay(session_id, run_id, relay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run_id

    async def _relay(self, session_id: str, run_id: str, relay: RunRelay) -> None:
        """Relay the run; then tell its end with its last entry by its own account."""
        status, last = await relay.run()
        with contextlib.suppress(Exception):
            status, last = await self.outcome(session_id, run_id)
        self._forget(self._relays, (session_id, run_id))
        self.listener.run_status(session_id, run_id, status, last)

    async def aclose(self) -> None:
        """Stop relaying (the runs go on, on their workers)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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
        query = (
            f'{SEARCH_ATTRIBUTE} = "{session_id}" AND {KIND_ATTRIBUTE} = "run" '
            'AND ExecutionStatus = "Running"'
        )
        try:
            listed = [_run_id(w.id) async for w in self.client.list_workflows(query)]
        except RPCError as exc:
            if exc.status != RPCStatusCode.INVALID_ARGUMENT:
                raise
            # a namespace no worker registered the search attributes in yet: no run there
            # can have them, so no run of the session is running
            listed = []
        # visibility lags: a run listed as running may have ended a moment ago
        found = [r for r in listed if await self._described(session_id, r) == "started"]
        mine = [r for s, r in self._streams if s == session_id and r not in found]
        return mine + found

    async def status(self, session_id: str, run_id: str) -> Status:
        """What the run does now: as Temporal describes it, a running run asked once whether it
        waits for people (docs/design.md#http-api). Not what this server relays: that follows
        the run's events, which may trail its state by a moment."""
        status = await self._described(session_id, run_id)
        if status != "started":
            return status
        try:
            async with asyncio.timeout(END_QUERY_TIMEOUT):
                state = await self.state(session_id, run_id)
        except Exception as exc:  # no worker to answer: what Temporal says is all there is
            logger.info("the state of run %s: %s", run_id, type(exc).__name__)
            return status
        return "awaiting_approval" if state.status == "awaiting_approval" else status

    async def _described(self, session_id: str, run_id: str) -> Status:
        """The run's status from Temporal's description (a waiting run is ``started``)."""
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None
            raise
        return _STATUS.get(described.status, "failed") if described.status else "started"

    async def outcome(self, session_id: str, run_id: str) -> tuple[Status, str]:
        """Wait for the run's end (a long poll of its result, not billed); say how it ended and
        the ID of the last entry it stored (from its result; for a failed or cancelled run, from
        one ``state()`` query of the closed run; ``""`` when that cannot be had)."""
        handle = self.client.get_workflow_handle(
            run_workflow_id(session_id, run_id), result_type=RunResult
        )
        try:
            result = await handle.result()
        except Exception:
            status = await self._described(session_id, run_id)
            if status == "started":
                return status, ""  # the long poll broke, not the run
            try:
                async with asyncio.timeout(END_QUERY_TIMEOUT):
                    state = await self.state(session_id, run_id)
            except Exception as exc:  # a closed run no worker can replay now, say
                logger.info("the entries of ended run %s: %s", run_id, type(exc).__name__)
                return status, ""
            return status, state.new_entry_ids[-1] if state.new_entry_ids else ""
        return "completed", result.new_entry_ids[-1] if result.new_entry_ids else ""

    async def state(self, session_id: str, run_id: str) -> RunState:
        """The run's ``state()``: asked once when a stream attaches to a run it did not see start
        (its turn count keys the reply's live deltas)."""
        return await self.executor.state(session_id, run_id)

    async def send(self, session_id: str, entry: MessageEntry, when: When) -> tuple[str, str]:
        """The ``send`` update of the session's running run, answered once its validator
        accepted the message (delivery comes later, a receipt on the stream)."""
        for run_id in await self.active(session_id):
            handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
            message_id = new_id()
            body = send_body(entry, when).model_copy(update={"message_id": message_id})
            try:
                update = await handle.start_update(
                    "send",
                    body,
                    id=message_id,
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=str,
                )
                # the SDK knows the outcome at once only when the run refused (or already
                # delivered) it; result() then says which without waiting
                if getattr(update, "_known_outcome", None) is not None:
                    await update.result()
            except (WorkflowUpdateFailedError, RPCError):
                continue  # that run ended or takes no more messages
            return run_id, message_id
        raise no_run_accepts(session_id)

    async def decide(self, session_id: str, decision: ApprovalDecision) -> Entry:
        """Any server process decides from the session ID alone: the run that asked takes the
        decision through its ``decide`` update, else it is committed at the session's leaf
        (and a run carries out the turn's calls once all are decided)."""
        name = self.agents[0] if self.agents else "agent"  # this handle only decides
        handle = await new(name, store=self.store, session_id=session_id, executor=self.executor)
        entry = await decide_with(handle, decision)
        await continue_settled(self, self.store, session_id)
        return entry

    async def compact(
        self, session_id: str, keep_turns: int, *, leaf_id: str | None, agent: str | None
    ) -> CompactionEntry | None:
        """The compaction workflow on the queue's workers, as ``agent.compact`` does there. A
        run start on this replica waits for it; one on another replica is not held back."""
        name = pick_agent(self.agents, agent)
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            refuse_busy(session_id, await self.active(session_id), "reject")
            handle = await new(
                name, store=self.store, session_id=session_id, executor=self.executor
            )
            await open_at(handle, leaf_id)
            entry = await handle.compact(keep_turns)
        self.listener.stored(session_id)
        return entry
