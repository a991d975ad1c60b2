"""Many sessions at once on worker processes: the driver, the fleet and the store audit.

Shared by ``bench/load_bench.py`` and ``tests/temporal/test_worker_kill_under_load.py``:

- :class:`WorkerFleet` starts real ``durable-agent worker`` processes (the CLI, serving
  :mod:`tests.support.load_app`) on one task queue, waits on their ready files, SIGKILLs or stops
  them by PID;
- :class:`LoadDriver` runs S sessions of T turns concurrently through the public client API
  (``new`` + ``run`` + ``wait`` with a :class:`TemporalExecutor`) and records every run;
- :func:`victim_running_activity` is the real signal a kill waits for: a run's pending activity
  started by the victim's worker identity (``pid@host``, Temporal's default);
- :func:`audit` re-reads every session from the store, against the runs the driver started: a
  run that returned with its turn not stored is lost; one whose ``wait()`` raised is failed, one
  still in flight at the driver's cut is unfinished (both with the server's workflow status);
  a turn never asked for (budget spent, or the session's previous run did not return) is not
  due. Also duplicated entries, tool calls not answered exactly once, entries off the chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from durable_agent import Agent, RunStream, new
from durable_agent.cli.processes import ManagedProcess, start_worker
from durable_agent.session import Entry, MessageEntry, SessionNotFoundError, Store
from durable_agent.workflows import TemporalExecutor, Timeouts, run_workflow_id
from tests.support.load_app import AGENT, LATENCY_ENV, answer_text, is_tool_turn, turn_text
from tests.support.worker_stats import STATS_ENV

__all__ = [
    "APP_REF",
    "Audit",
    "LoadDriver",
    "RunRecord",
    "WorkerFleet",
    "audit",
    "victim_running_activity",
    "worker_identity",
]

APP_REF = f"{Path(__file__).resolve().with_name('load_app.py')}:app"


def worker_identity(pid: int) -> str:
    """The identity a worker process reports to Temporal (the SDK default, ``pid@hostname``)."""
    return f"{pid}@{socket.gethostname()}"


class WorkerFleet:
    """``durable-agent worker`` processes on one task queue; all stopped by PID at ``stop_all``."""

    def __init__(
        self,
        address: str,
        store_spec: str,
        task_queue: str,
        logs: Path,
        *,
        latency: float = 0.2,
        tuning: dict[str, int] | None = None,
    ) -> None:
        self.address, self.store_spec, self.task_queue, self.logs = (
            address,
            store_spec,
            task_queue,
            logs,
        )
        self.env = {LATENCY_ENV: str(latency)}
        for name, value in (tuning or {}).items():  # the CLI flags' environment variables
            self.env[f"DURABLE_AGENT_{name.upper()}"] = str(value)
        self.procs: list[ManagedProcess] = []
        self._started = 0
        self._index: dict[int, int] = {}

    async def start(self) -> ManagedProcess:
        """One more worker; returns once it polls the task queue (its ready file exists).
        Its index is taken before the first await, so workers started together get their own
        log and stats files."""
        index, self._started = self._started, self._started + 1
        proc = await start_worker(
            name=f"worker-{index}",
            app_ref=APP_REF,
            store_spec=self.store_spec,
            task_queue=self.task_queue,
            address=self.address,
            log_path=self.logs / f"worker-{index}.log",
            ready_dir=self.logs,
            extra_env={**self.env, STATS_ENV: str(self.stats_path(index))},
        )
        self.procs.append(proc)
        self._index[proc.pid] = index
        return proc

    def index_of(self, proc: ManagedProcess) -> int:
        """The index ``proc`` was started under (its log and stats file names)."""
        return self._index[proc.pid]

    def stats_path(self, index: int) -> Path:
        """Where worker ``index`` writes its Mongo ops and activity waits (worker_stats)."""
        return self.logs / f"worker-{index}.stats.json"

    def running(self) -> list[ManagedProcess]:
        return [p for p in self.procs if p.running()]

    @staticmethod
    def kill(proc: ManagedProcess) -> None:
        """SIGKILL by PID: no shutdown, no goodbye to the server."""
        proc.kill()

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop(timeout=10)


@dataclass
class RunRecord:
    """One run as the client saw it: returned, failed (``error``: ``wait()`` raised, or did not
    return within the run's timeout) or unfinished (still in flight at the driver's ``cut``)."""

    session_id: str
    turn: int
    workflow_id: str
    started: float
    ended: float = 0.0
    error: str | None = None
    unfinished: bool = False
    status: str | None = None
    """The workflow's status on the server, read for every run that did not return."""

    @property
    def returned(self) -> bool:
        return bool(self.ended) and self.error is None and not self.unfinished

    @property
    def latency(self) -> float:
        return self.ended - self.started


WAIT_GRACE = 30.0
"""Seconds a client waits past a run's execution timeout, so the server's own timeout (a run
failed as timed out) is what a wait sees first."""


@dataclass
class LoadDriver:
    """S sessions x T turns, all sessions concurrently, each session's turns in sequence.

    Every turn the driver starts is a run it asked for and is audited as one; a turn it never
    started (the session's budget was spent, or its previous run did not return) is not due."""

    client: Client
    store: Store
    task_queue: str
    sessions: int
    turns: int
    timeouts: Timeouts
    prefix: str = field(default_factory=lambda: f"load-{uuid.uuid4().hex[:8]}")
    run_timeout: float = 180.0
    """Each run's execution timeout on the server."""
    budget: float | None = None
    """Seconds after the start after which no session starts another turn (``None``: every
    session runs all its turns)."""
    cut: float | None = None
    """Seconds after the start after which the driver stops waiting: runs still in flight are
    recorded as unfinished (their status read from the server, then terminated by
    :meth:`stop_unfinished`), not as lost or failed (``None``: wait for every run)."""
    records: list[RunRecord] = field(default_factory=list)
    active: dict[str, str] = field(default_factory=dict)
    """session ID -> workflow ID of its run in flight."""
    started: float = 0.0
    ended: float = 0.0

    def __post_init__(self) -> None:
        self._progress = asyncio.Condition()
        self._left: dict[str, RunStream] = {}

    @property
    def session_ids(self) -> list[str]:
        return [f"{self.prefix}-{i:04d}" for i in range(self.sessions)]

    @property
    def planned(self) -> int:
        """Turns the load would have asked for with no budget: S x T."""
        return self.sessions * self.turns

    def completed(self) -> int:
        return sum(1 for r in self.records if r.returned)

    def completed_within(self, seconds: float) -> int:
        """Runs that returned within ``seconds`` of the start (the steady-state window)."""
        return sum(1 for r in self.records if r.returned and r.ended - self.started <= seconds)

    def unfinished(self) -> list[RunRecord]:
        return [r for r in self.records if r.unfinished]

    async def wait_completed(self, n: int, within: float) -> None:
        """Until ``n`` runs have returned from ``wait()`` (a real progress signal, no sleeps)."""
        async with self._progress:
            await asyncio.wait_for(self._progress.wait_for(lambda: self.completed() >= n), within)

    async def run(self) -> None:
        executor = TemporalExecutor(
            self.client,
            task_queue=self.task_queue,
            timeouts=self.timeouts,
            execution_timeout=timedelta(seconds=self.run_timeout),
        )
        self.started = time.perf_counter()
        await asyncio.gather(*(self._session(sid, executor) for sid in self.session_ids))
        self.ended = time.perf_counter()

    async def _session(self, session_id: str, executor: TemporalExecutor) -> None:
        agent = await new(AGENT, store=self.store, session_id=session_id, executor=executor)
        for k in range(1, self.turns + 1):
            if self.budget is not None and time.perf_counter() - self.started >= self.budget:
                break  # out of time: the turns not begun are not asked for
            rid = uuid.uuid4().hex[:16]
            record = RunRecord(session_id, k, run_workflow_id(session_id, rid), time.perf_counter())
            self.records.append(record)
            self.active[session_id] = record.workflow_id
            await self._turn(agent, k, rid, record)
            self.active.pop(session_id, None)
            async with self._progress:
                self._progress.notify_all()
            if not record.returned:
                break  # the next turn would start from an unknown leaf: it is not asked for
        await agent.close()

    async def _turn(self, agent: Agent, k: int, rid: str, record: RunRecord) -> None:
        """One run, waited for until it returns, fails, or the driver's cut."""
        streams: list[RunStream] = []

        async def go() -> None:
            streams.append(await agent.run(turn_text(k), run_id=rid))
            await streams[0].wait()

        limit, at_cut = self.run_timeout + WAIT_GRACE, False
        if self.cut is not None:
            left = self.started + self.cut - time.perf_counter()
            limit, at_cut = min(limit, max(0.0, left)), left < limit
        task = asyncio.ensure_future(go())
        done, _ = await asyncio.wait({task}, timeout=limit)
        record.ended = time.perf_counter()
        if not done:
            task.cancel()  # this client stops waiting; wait() shields the run's own producer
            with contextlib.suppress(BaseException):
                await task
            if at_cut:
                record.unfinished = True
                if streams:
                    self._left[record.workflow_id] = streams[0]
            else:
                record.error = f"wait() did not return within {limit:.0f} s"
        elif (exc := task.exception()) is not None:  # reported, never raised
            record.error = f"{type(exc).__name__}: {exc}"

    async def stop_unfinished(self) -> None:
        """Read the server's status of every run unfinished at the cut, then terminate it (the
        store stays as the run left it, and the server has nothing left to run)."""
        for record in self.unfinished():
            handle = self.client.get_workflow_handle(record.workflow_id)
            record.status = await _status(self.client, record.workflow_id)
            if record.status == "RUNNING":
                with contextlib.suppress(Exception):
                    await handle.terminate(reason="load bench: unfinished at the point's budget")
            stream = self._left.pop(record.workflow_id, None)
            if stream is not None:  # its producer ends with the run; collect its outcome
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(stream.wait(), 30)


async def _status(client: Client, workflow_id: str) -> str:
    """The workflow's status on the server (``RUNNING``, ``FAILED``...), or why it has none."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except Exception as exc:  # never started, or unreadable: say so
        return f"not found ({type(exc).__name__})"
    return described.status.name if described.status is not None else "UNKNOWN"


async def victim_running_activity(
    client: Client, driver: LoadDriver, identity: str, *, within: float = 60.0
) -> str:
    """The workflow ID of a run with an activity the worker ``identity`` has started and not
    finished, polled from the server's description of the runs in flight."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for workflow_id in list(driver.active.values()):
            try:
                described = await client.get_workflow_handle(workflow_id).describe()
            except Exception:  # not started yet, or finished a moment ago
                continue
            for pending in described.raw_description.pending_activities:
                started = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                # CLI workers append " store:<id>" to Temporal's default pid@host identity
                worker = pending.last_worker_identity.split(" ", 1)[0]
                if started and worker == identity:
                    return workflow_id
        await asyncio.sleep(0.05)  # poll interval of the probe, not a synchronisation sleep
    raise TimeoutError(f"no activity of {identity} seen running within {within:.0f} s")


@dataclass
class Audit:
    """What the store holds, against the runs the driver started.

    A turn the driver never asked for is not due. A run that returned must have its whole turn
    stored once; one that failed or was unfinished at the cut is counted as such (with its
    workflow status from the server), its partial turn allowed, never counted as lost."""

    runs: int = 0
    """Runs started: the turns asked for."""
    waits_returned: int = 0
    failed: int = 0
    """Runs whose ``wait()`` raised or did not return within the run's timeout."""
    unfinished: int = 0
    """Runs still in flight when the driver stopped waiting (its cut): not yet due."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Server status -> count, over the runs that did not return."""
    lost: int = 0
    """Runs that returned (or completed on the server) with any expected message missing."""
    duplicated: int = 0
    """Extra copies of an expected message, plus entry IDs stored twice."""
    tool_calls: int = 0
    misanswered: int = 0
    """Tool calls without exactly one result."""
    off_chain: int = 0
    """Entries whose parent is not the entry appended before them (a forked or stale run)."""
    unexpected: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self, kills: int) -> str:
        return f"runs {self.runs} kills {kills} lost {self.lost} duplicated {self.duplicated}"

    @property
    def clean(self) -> bool:
        """Nothing lost, doubled, misanswered or forked, and no run failed (runs unfinished at
        the cut are a shortfall of the budget, reported apart: see :attr:`complete`)."""
        return not (
            self.lost
            or self.duplicated
            or self.misanswered
            or self.off_chain
            or self.unexpected
            or self.failed
        )

    @property
    def complete(self) -> bool:
        """Clean, and every run's ``wait()`` returned."""
        return self.clean and self.waits_returned == self.runs


def _key(message_entry: MessageEntry) -> list[tuple[str, str]]:
    m = message_entry.message
    if m.role == "tool_result":
        return [("tool_result", m.tool_call_id or "")]
    keys = [("call", c.id) for c in m.tool_calls()]
    text = m.text()
    return keys + ([(m.role, text)] if text or not keys else [])


def _expected(k: int) -> list[tuple[str, str]]:
    keys = [("user", turn_text(k)), ("assistant", answer_text(k))]
    if is_tool_turn(k):
        keys += [("call", f"call-{k}"), ("tool_result", f"call-{k}")]
    return keys


def _audit_one(
    result: Audit, session_id: str, entries: Sequence[Entry], runs: Sequence[RunRecord]
) -> None:
    ids = Counter(e.id for e in entries)
    result.duplicated += sum(n - 1 for n in ids.values())
    parent = None
    for entry in entries:
        if entry.parent_id != parent:
            result.off_chain += 1
            result.problems.append(f"{session_id}: {entry.id} has parent {entry.parent_id}")
        parent = entry.id
    keys: Counter[tuple[str, str]] = Counter(
        key for e in entries if isinstance(e, MessageEntry) for key in _key(e)
    )
    wanted = {key for run in runs for key in _expected(run.turn)}
    for run in runs:
        turn = _expected(run.turn)
        due = run.returned or run.status == "COMPLETED"
        if due and any(keys[key] == 0 for key in turn):
            result.lost += 1
            result.problems.append(f"{session_id}: turn {run.turn} incomplete ({run.workflow_id})")
        result.duplicated += sum(max(0, keys[key] - 1) for key in turn)
    result.unexpected += sum(n for key, n in keys.items() if key not in wanted)
    calls = [key[1] for key in keys.elements() if key[0] == "call"]
    result.tool_calls += len(calls)
    # a call of a run that did not return may be unanswered: only a second answer is wrong there
    open_calls = {f"call-{r.turn}" for r in runs if not r.returned}
    result.misanswered += sum(
        1
        for c in set(calls)
        if keys[("tool_result", c)] > 1 or (keys[("tool_result", c)] == 0 and c not in open_calls)
    )


async def audit(store: Store, driver: LoadDriver) -> Audit:
    """Re-read every session of ``driver`` from ``store`` and count what is wrong; the server's
    status of every run that did not return is read first (call
    :meth:`LoadDriver.stop_unfinished` before, so nothing is still writing)."""
    result = Audit(runs=len(driver.records), waits_returned=driver.completed())
    statuses: Counter[str] = Counter()
    for record in driver.records:
        if record.returned:
            continue
        if record.status is None:
            record.status = await _status(driver.client, record.workflow_id)
        statuses[record.status] += 1
        if record.unfinished:
            result.unfinished += 1
        else:
            result.failed += 1
            result.problems.append(f"{record.workflow_id}: {record.status}: {record.error}")
    result.statuses = dict(statuses)
    by_session: dict[str, list[RunRecord]] = {sid: [] for sid in driver.session_ids}
    for record in driver.records:
        by_session[record.session_id].append(record)
    for session_id, runs in by_session.items():
        try:
            entries = await store.load_entries(session_id)
        except SessionNotFoundError:  # on Temporal a session is created by its first run
            entries = []
        _audit_one(result, session_id, entries, runs)
    return result
