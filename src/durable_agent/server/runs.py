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
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ..activities.contracts import RunState
from ..activities.spec import AgentSpec
from ..agent.loop import model
from ..durable.agent import Agent, new
from ..durable.errors import AgentError, RunActiveError, RunCancelledError, UnknownAgentError
from ..durable.stream import RunStream
from ..session.entries import Entry
from ..session.errors import SessionExistsError
from ..session.ids import new_id
from ..session.store import Store
from ..workflows.executor import TemporalExecutor, run_workflow_id
from ..workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE

__all__ = [
    "REMEMBERED",
    "LocalRuns",
    "OnBusy",
    "RunListener",
    "RunNotFoundError",
    "Runs",
    "RunsUnavailableError",
    "TemporalRuns",
    "run_active",
]

logger = logging.getLogger("durable_agent.server")

OnBusy = Literal["reject", "next_turn", "at_end", "sibling"]
Status = Literal["started", "awaiting_approval", "completed", "failed", "cancelled"]


REMEMBERED = 10_000
"""How many ended runs a process remembers the outcome of (the oldest forgotten first)."""


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

    def run_status(self, session_id: str, run_id: str, status: Status) -> None: ...

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


def _pick(names: Sequence[str], agent: str | None) -> str:
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


async def _open(agent: Agent, leaf_id: str | None) -> Agent:
    if leaf_id is not None and leaf_id != agent.leaf_id:
        await agent.branch(leaf_id)
    return agent


def _refuse_busy(session_id: str, active: list[str], on_busy: OnBusy) -> None:
    """``sibling`` runs beside the active run; anything else is refused while one goes
    (delivering a message into a running run, ``next_turn``/``at_end``, is not served yet)."""
    if active and on_busy != "sibling":
        raise run_active(session_id, active[0])


class LocalRuns:
    """Agents run in this process; a run is lost with the process (development)."""

    local = True

    def __init__(self, store: Store, agents: Mapping[str, AgentSpec], listener: RunListener):
        self.store = store
        self.agents = dict(agents)
        self.listener = listener
        self._streams: dict[str, dict[str, RunStream]] = {}
        self._ended: dict[tuple[str, str], Status] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def start(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        leaf_id: str | None,
        agent: str | None,
        on_busy: OnBusy,
    ) -> str:
        spec = self.agents[_pick(list(self.agents), agent)]
        opts = spec.options()
        async with self._lock:  # the busy check and the start, one at a time
            _refuse_busy(session_id, await self.active(session_id), on_busy)
            handle = await new(
                model(spec.model),
                store=self.store,
                session_id=session_id,
                system_prompt=opts.system_prompt,
                tools=opts.tools,
                max_turns=opts.max_turns,
                model_options=opts.model_options,
            )
            await _open(handle, leaf_id)
            run_id = new_id()
            stream = await handle.run(*entries, run_id=run_id)
            self._streams.setdefault(session_id, {})[run_id] = stream
        self.listener.run_status(session_id, run_id, "started")
        task = asyncio.create_task(self._relay(handle, stream, run_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run_id

    async def _relay(self, handle: Agent, stream: RunStream, run_id: str) -> None:
        """Tell the listener what the run does: live text, receipts, its end."""
        sid, leaf = handle.session_id, handle.leaf_id
        status: Status = "completed"
        try:
            async for event in stream.events():
                inner = event.agent
                if event.leaf_id is not None:
                    leaf = event.leaf_id
                    self.listener.stored(sid)
                if inner is not None and inner.type == "message_update":
                    text = inner.delta if inner.delta is not None else ""
                    self.listener.run_delta(sid, run_id, leaf, text, bool(inner.restart))
        except RunCancelledError:
            status = "cancelled"
        except Exception as exc:
            logger.info("run %s of %s failed: %s", run_id, sid, type(exc).__name__)
            status = "failed"
        finally:
            self._streams.get(sid, {}).pop(run_id, None)
            self._ended[(sid, run_id)] = status
            while len(self._ended) > REMEMBERED:
                del self._ended[next(iter(self._ended))]
            self.listener.stored(sid)
            self.listener.run_status(sid, run_id, status)

    async def cancel(self, session_id: str, run_id: str) -> None:
        stream = self._streams.get(session_id, {}).get(run_id)
        if stream is None:
            if (session_id, run_id) in self._ended:
                return
            raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}")
        task = asyncio.create_task(stream.cancel())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def active(self, session_id: str) -> list[str]:
        return list(self._streams.get(session_id, {}))

    async def status(self, session_id: str, run_id: str) -> Status:
        if run_id in self._streams.get(session_id, {}):
            return "started"
        try:
            return self._ended[(session_id, run_id)]
        except KeyError:
            raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None

    async def aclose(self) -> None:
        for runs in list(self._streams.values()):
            for stream in list(runs.values()):
                with contextlib.suppress(Exception):
                    await stream.cancel()


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
        name = _pick(self.agents, agent)
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            _refuse_busy(session_id, await self.active(session_id), on_busy)
            await _create(self.store, session_id)
            handle = await new(
                name, store=self.store, session_id=session_id, executor=self.executor
            )
            await _open(handle, leaf_id)
            run_id = new_id()
            stream = await handle.run(*entries, run_id=run_id)
        # the stream follows the run at an unread pace until it ends; kept until then, so the
        # busy check sees the run before visibility does
        key = (session_id, run_id)
        self._streams[key] = stream
        stream.when_done(lambda: self._forget(key))
        self.listener.run_status(session_id, run_id, "started")
        return run_id

    def _forget(self, key: tuple[str, str]) -> None:
        self._streams.pop(key, None)

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
        found = [r for r in listed if await self.status(session_id, r) == "started"]
        mine = [r for s, r in self._streams if s == session_id and r not in found]
        return mine + found

    async def status(self, session_id: str, run_id: str) -> Status:
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None
            raise
        return _STATUS.get(described.status, "failed") if described.status else "started"

    async def outcome(self, session_id: str, run_id: str) -> Status:
        """Wait for the run's end (a long poll of its result, not billed) and say how."""
        handle = self.client.get_workflow_handle(run_workflow_id(session_id, run_id))
        try:
            await handle.result()
        except Exception:
            return await self.status(session_id, run_id)
        return "completed"

    async def state(self, session_id: str, run_id: str) -> RunState:
        """The run's ``state()``: asked once when a stream attaches to a run it did not see start
        (its turn count keys the reply's live deltas)."""
        return await self.executor.state(session_id, run_id)
