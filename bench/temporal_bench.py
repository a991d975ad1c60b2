"""Benchmark: the Temporal executor on a real dev server (SQLite + WAL) this script starts itself.

(a) **History per turn.** Workflow history bytes and events added per turn, read from the server
    (``fetch_history()``): over 100 sequential ``run()`` calls on one handle (each a new run
    workflow), and over one run of 100 tool-calling model turns (the model answers at turn 101,
    ``max_turns=200``). The model is gated inside its activity, so each snapshot is taken at the
    same point of every turn (``call_model`` scheduled and running, nothing after it). Turn *k*'s
    increment is the history between the snapshots at model calls *k* and *k+1*: model reply *k*,
    its append, the tool call, the tool result's append, scheduling model call *k+1*. Replies and
    tool results are equal-sized, so the turn-100 increment must be within 10% of turn 1's.
(b) **Durability overhead per model turn**, zero-latency model, against a bare one-activity
    workflow (``bench/_bare_workflow.py``) on the same server, worker and process, interleaved.
    A model turn is the ``call_model`` activity + the ``append_entries`` activity storing the
    reply (+ the workflow tasks between them), measured worker-side from model call start to the
    next activity's start, while the client streams events with the executor's ``events(after)``
    query polling; the baseline is one no-op activity round trip measured the same way (start to
    next start). Also: a whole one-turn run (``run()`` → last event) against a whole one-activity
    workflow (start → result).
(c) **Crash recovery.** A worker subprocess is SIGKILLed while a model call streams, and again
    while a slow tool runs; a new worker subprocess is started at once; kill → run completed
    (server) and kill → ``wait()`` returned (client), with the executor's default ``Timeouts`` and
    with short ones. Target: under 5 s plus the interrupted call's own duration.

``--compare REV`` runs the same parts a second time against a git worktree of ``REV`` (this
script, that revision's ``src`` on ``PYTHONPATH``, in a subprocess) and prints both side by side.

The dev server is started with ``history.transferProcessorMaxPollRPS=1000``: its default (20,
for its single history shard) lets about 28 activity round trips through at full speed and then
holds every workflow task about 40 ms, so any sequence of more than a few turns runs at 50 ms per
activity round trip whatever the executor does. ``--transfer-rps 0`` keeps the server default.
``--passthrough`` runs the workers with ``durable_agent`` passed through the workflow sandbox,
which ``create_worker`` does not do by default (see the first-workflow-task figures).

Run: ``.venv/bin/python bench/temporal_bench.py [--json PATH]`` (about 4-5 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from durable_agent import new, tool
from durable_agent.ai import ModelEvent, ModelRequest, Reply, ScriptedModel, ToolCall, Usage
from durable_agent.session import Store
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import (
    AgentSpec,
    TemporalExecutor,
    Timeouts,
    connect,
    create_worker,
    run_workflow_id,
)

SCRIPT = Path(__file__).resolve()
BENCH_DIR = SCRIPT.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import _bare_workflow  # noqa: E402
from _compare import print_side_by_side, run_against  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from _stats import pct, summary  # noqa: E402

TRANSFER_RPS_KEY = "history.transferProcessorMaxPollRPS"


def short_timeouts(heartbeat: float) -> Timeouts:
    """The short settings for (c): a short model heartbeat timeout, first retry after 0.1 s."""
    return Timeouts(
        model_heartbeat=heartbeat, retry_initial=0.1, retry_max=1.0, tool_heartbeat=heartbeat
    )


FIXED_USAGE = Usage(input=1000, output=100)
FILLER = "lorem ipsum dolor sit amet " * 8  # 216 chars: every reply carries some text


# -- statistics --------------------------------------------------------------------------------


def fmt(s: dict[str, float], unit: str = "ms", scale: float = 1000.0, digits: int = 1) -> str:
    m, lo, hi = s["median"] * scale, s["min"] * scale, s["max"] * scale
    return f"{m:.{digits}f} {unit} ({lo:.{digits}f}..{hi:.{digits}f}, n={int(s['n'])})"


# -- models and tools --------------------------------------------------------------------------


def assistant_turns(request: ModelRequest) -> int:
    """Assistant messages since the last user message (this run's turns so far)."""
    n = 0
    for m in reversed(request.messages):
        if m.role == "user":
            break
        if m.role == "assistant":
            n += 1
    return n


def tool_turns_script(tool_turns: int) -> Callable[[ModelRequest], Reply]:
    """Call ``step`` on each of turns 1..tool_turns, answer at the next; equal-sized replies."""

    def respond(request: ModelRequest) -> Reply:
        turn = assistant_turns(request) + 1
        if turn <= tool_turns:
            return Reply(
                text=f"turn {turn:04d} {FILLER}",
                tool_calls=[ToolCall(id=f"call-{turn:04d}", name="step", arguments={"k": turn})],
                usage=FIXED_USAGE,
                chunk_size=64,
            )
        return Reply(text=f"done {turn:04d} {FILLER}", usage=FIXED_USAGE, chunk_size=64)

    return respond


def answer_script(request: ModelRequest) -> Reply:
    """One text answer per user message, equal-sized."""
    n = sum(1 for m in request.messages if m.role == "user")
    return Reply(text=f"answer {n:04d} {FILLER}", usage=FIXED_USAGE, chunk_size=64)


TOOL_STARTS: list[float] = []


@tool
async def step(k: int) -> str:
    """A no-op tool with an equal-sized result."""
    TOOL_STARTS.append(time.perf_counter())
    return f"ok {k:04d}"


class Gate:
    """Holds each model call until the benchmark has looked at the history."""

    def __init__(self) -> None:
        self.entered: asyncio.Queue[int] = asyncio.Queue()
        self.release: asyncio.Queue[None] = asyncio.Queue()


class InstrumentedModel:
    """Wraps a ScriptedModel: records when each call starts, optionally waits on a gate."""

    def __init__(self, inner: ScriptedModel, gate: Gate | None = None) -> None:
        self.inner = inner
        self.gate = gate
        self.starts: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.starts.append(time.perf_counter())
        if self.gate is not None:
            self.gate.entered.put_nowait(assistant_turns(request) + 1)
            await self.gate.release.get()
        async for event in self.inner.stream(request):
            yield event


# -- shared setup ------------------------------------------------------------------------------


def worker_options(passthrough: bool) -> dict[str, Any]:
    """``--passthrough``: share ``durable_agent`` with the workflow sandbox instead of letting it
    re-import the package for every workflow run (not what ``create_worker`` does by default)."""
    if not passthrough:
        return {}
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    restrictions = SandboxRestrictions.default.with_passthrough_modules("durable_agent")
    return {"workflow_runner": SandboxedWorkflowRunner(restrictions=restrictions)}


def queue_name(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client, store: Store, agents: dict[str, AgentSpec], passthrough: bool
) -> AsyncIterator[str]:
    queue = queue_name("agent")
    worker = await create_worker(
        client,
        task_queue=queue,
        store=store,
        agents=agents,
        workflow_failure_exception_types=[Exception],
        **worker_options(passthrough),
    )
    async with worker:
        yield queue


def make_store(kind: str, root: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    return FileStore(root)


def first_workflow_task(history: WorkflowHistory) -> float:
    """Seconds from the first workflow task's start to its completion (the sandbox's import of
    the workflow module counts here)."""
    started = completed = None
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and started is None:
            started = e.event_time.ToDatetime()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            completed = e.event_time.ToDatetime()
            break
    if started is None or completed is None:
        return float("nan")
    return (completed - started).total_seconds()


async def history_size(client: Client, workflow_id: str) -> tuple[int, int, int]:
    """(events, protobuf bytes, JSON bytes) of a workflow's current history."""
    hist = await client.get_workflow_handle(workflow_id).fetch_history()
    events = list(hist.events)
    return len(events), sum(e.ByteSize() for e in events), len(hist.to_json())


# -- (a) history per turn ----------------------------------------------------------------------


def within(a: float, b: float, tolerance: float = 0.10) -> bool:
    return abs(b - a) <= tolerance * a


async def bench_history(
    client: Client, store: Store, turns: int, passthrough: bool
) -> dict[str, Any]:
    gate = Gate()
    gated = InstrumentedModel(ScriptedModel(tool_turns_script(turns)), gate)
    agents = {
        "answer": AgentSpec(model=ScriptedModel(answer_script)),
        "tools": AgentSpec(model=gated, tools=(step,), max_turns=turns * 2),
    }
    out: dict[str, Any] = {"turns": turns}
    async with agent_worker(client, store, agents, passthrough) as queue:
        executor = TemporalExecutor(
            client, task_queue=queue, execution_timeout=timedelta(minutes=10)
        )

        # 1. one handle, `turns` sequential runs, each a new run workflow
        agent = await new("answer", store=store, executor=executor)
        per_run: list[tuple[int, int, int]] = []
        first_wft: list[float] = []
        t0 = time.perf_counter()
        for i in range(1, turns + 1):
            run_id = f"r{i:04d}"
            stream = await agent.run(f"question {i:04d}", run_id=run_id)
            await stream.wait()
            wid = run_workflow_id(agent.session_id, run_id)
            per_run.append(await history_size(client, wid))
            first_wft.append(
                first_workflow_task(await client.get_workflow_handle(wid).fetch_history())
            )
        runs_seconds = time.perf_counter() - t0
        first, last = per_run[0], per_run[-1]
        out["runs"] = {
            "seconds": runs_seconds,
            "per_run_events": [r[0] for r in per_run],
            "per_run_bytes": [r[1] for r in per_run],
            "per_run_json_bytes": [r[2] for r in per_run],
            "turn1": {"events": first[0], "bytes": first[1], "json_bytes": first[2]},
            f"turn{turns}": {"events": last[0], "bytes": last[1], "json_bytes": last[2]},
            "within_10pct": within(first[1], last[1]) and within(first[2], last[2]),
            "first_workflow_task_seconds": {
                "p50": pct(first_wft, 0.5),
                "p95": pct(first_wft, 0.95),
                "max": max(first_wft),
            },
        }

        # 2. one run of `turns` tool-calling model turns, answer at turn `turns + 1`
        agent2 = await new("tools", store=store, executor=executor, max_turns=turns * 2)
        run_id = "long"
        wid = run_workflow_id(agent2.session_id, run_id)
        t0 = time.perf_counter()
        stream = await agent2.run("go", run_id=run_id)
        snapshots: dict[int, tuple[int, int, int]] = {}
        for _ in range(turns + 1):
            turn = await asyncio.wait_for(gate.entered.get(), 60)
            snapshots[turn] = await history_size(client, wid)
            gate.release.put_nowait(None)
        messages = await stream.wait()
        long_seconds = time.perf_counter() - t0
        end = await history_size(client, wid)
        inc = [
            tuple(snapshots[k + 1][j] - snapshots[k][j] for j in range(3))
            for k in range(1, turns + 1)
        ]
        t1, tn = inc[0], inc[-1]
        out["one_run"] = {
            "seconds": long_seconds,
            "messages": len(messages),
            "prefix": {"events": snapshots[1][0], "bytes": snapshots[1][1]},
            "increment_events": [i[0] for i in inc],
            "increment_bytes": [i[1] for i in inc],
            "increment_json_bytes": [i[2] for i in inc],
            "turn1": {"events": t1[0], "bytes": t1[1], "json_bytes": t1[2]},
            f"turn{turns}": {"events": tn[0], "bytes": tn[1], "json_bytes": tn[2]},
            "final_answer_turn": {
                "events": end[0] - snapshots[turns + 1][0],
                "bytes": end[1] - snapshots[turns + 1][1],
            },
            "total": {"events": end[0], "bytes": end[1], "json_bytes": end[2]},
            "within_10pct": within(t1[1], tn[1]) and within(t1[2], tn[2]),
        }
    return out


def print_history(res: dict[str, Any]) -> None:
    n = res["turns"]
    print(f"\n(a) workflow history added per turn, {n}-turn conversation")
    r = res["runs"]
    a, b = r["turn1"], r[f"turn{n}"]
    print(
        f"  {n} sequential run() calls on one handle (each its own run workflow, "
        f"{r['seconds']:.1f} s):"
    )
    print(f"    run 1:   {a['events']} events, {a['bytes']} B proto, {a['json_bytes']} B JSON")
    print(f"    run {n}: {b['events']} events, {b['bytes']} B proto, {b['json_bytes']} B JSON")
    print(
        f"    range over all runs: {min(r['per_run_bytes'])}..{max(r['per_run_bytes'])} B proto, "
        f"{min(r['per_run_events'])}..{max(r['per_run_events'])} events"
    )
    print(f"    turn {n} within 10% of turn 1: {'yes' if r['within_10pct'] else 'NO'}")
    w = r["first_workflow_task_seconds"]
    print(
        f"    first workflow task of each run (server times): p50 {w['p50'] * 1000:.0f} ms, "
        f"p95 {w['p95'] * 1000:.0f} ms, max {w['max'] * 1000:.0f} ms"
    )
    o = res["one_run"]
    a, b = o["turn1"], o[f"turn{n}"]
    print(
        f"  one run, {n} tool-calling model turns + final answer ({o['seconds']:.1f} s, "
        f"{o['messages']} messages):"
    )
    print(f"    start -> model call 1: {o['prefix']['events']} events, {o['prefix']['bytes']} B")
    print(f"    turn 1:   +{a['events']} events, +{a['bytes']} B proto, +{a['json_bytes']} B JSON")
    print(f"    turn {n}: +{b['events']} events, +{b['bytes']} B proto, +{b['json_bytes']} B JSON")
    print(
        f"    range over all turns: +{min(o['increment_bytes'])}..+{max(o['increment_bytes'])} B, "
        f"+{min(o['increment_events'])}..+{max(o['increment_events'])} events"
    )
    f = o["final_answer_turn"]
    print(f"    final answer + completion: +{f['events']} events, +{f['bytes']} B")
    t = o["total"]
    print(f"    whole run: {t['events']} events, {t['bytes']} B proto, {t['json_bytes']} B JSON")
    print(f"    turn {n} within 10% of turn 1: {'yes' if o['within_10pct'] else 'NO'}")


# -- (b) durability overhead -------------------------------------------------------------------


def gaps(xs: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(xs)]


async def bench_overhead(
    client: Client, store: Store, reps: int, samples: int, run_samples: int, passthrough: bool
) -> dict[str, Any]:
    model = InstrumentedModel(ScriptedModel(tool_turns_script(samples)))
    agents = {
        "turns": AgentSpec(model=model, tools=(step,), max_turns=samples * 2),
        "answer": AgentSpec(model=ScriptedModel(answer_script)),
    }
    bare_queue = queue_name("bare")
    bare_worker = Worker(
        client,
        task_queue=bare_queue,
        workflows=[_bare_workflow.BareWorkflow],
        activities=[_bare_workflow.noop],
        workflow_failure_exception_types=[Exception],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    )
    per_rep: dict[str, list[float]] = {}

    def record(name: str, xs: Sequence[float]) -> None:
        per_rep.setdefault(f"{name}_p50", []).append(pct(xs, 0.5))
        per_rep.setdefault(f"{name}_p95", []).append(pct(xs, 0.95))

    async with bare_worker, agent_worker(client, store, agents, passthrough) as queue:
        executor = TemporalExecutor(
            client, task_queue=queue, execution_timeout=timedelta(minutes=10)
        )
        # warm-up: both workers, both code paths; drains the server's transfer-queue burst
        # allowance, so with the server default both sides are measured in the same regime
        await client.execute_workflow(
            "bench.bare", 40, id=queue_name("warm"), task_queue=bare_queue, result_type=int
        )
        warm = await new("answer", store=store, executor=executor)
        await (await warm.run("warm up")).wait()

        for _ in range(reps):
            # bare: one no-op activity round trip inside a workflow (start to next start)
            _bare_workflow.STARTS.clear()
            await client.execute_workflow(
                "bench.bare",
                samples + 1,
                id=queue_name("bare-seq"),
                task_queue=bare_queue,
                result_type=int,
            )
            record("bare_activity", gaps(_bare_workflow.STARTS))

            # durable-agent: one run of `samples` tool turns, client streaming events
            model.starts.clear()
            TOOL_STARTS.clear()
            agent = await new("turns", store=store, executor=executor, max_turns=samples * 2)
            stream = await agent.run("go")
            async for _event in stream.events():
                pass
            m, t = list(model.starts), list(TOOL_STARTS)
            model_turn = [t[k] - m[k] for k in range(samples)]  # model + append (+ tool sched.)
            tool_leg = [m[k + 1] - t[k] for k in range(samples)]  # tool + append
            record("model_turn", model_turn)
            record("tool_leg", tool_leg)
            record("full_tool_turn", gaps(m))

            # whole workflows: bare one-activity workflow vs one-turn run
            bare_wf: list[float] = []
            one_turn: list[float] = []
            single = await new("answer", store=store, executor=executor)
            for i in range(run_samples):
                t0 = time.perf_counter()
                await client.execute_workflow(
                    "bench.bare",
                    1,
                    id=queue_name("bare-one"),
                    task_queue=bare_queue,
                    result_type=int,
                )
                bare_wf.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                stream = await single.run(f"question {i:04d}")
                async for _event in stream.events():
                    pass
                one_turn.append(time.perf_counter() - t0)
            record("bare_workflow", bare_wf)
            record("one_turn_run", one_turn)

    res: dict[str, Any] = {"reps": reps, "samples_per_rep": samples, "run_samples": run_samples}
    for key, values in per_rep.items():
        res[key] = summary(values)
    res["ratio_model_turn_vs_bare_activity_p50"] = summary(
        [
            a / b
            for a, b in zip(per_rep["model_turn_p50"], per_rep["bare_activity_p50"], strict=True)
        ]
    )
    res["ratio_model_turn_vs_bare_activity_p95"] = summary(
        [
            a / b
            for a, b in zip(per_rep["model_turn_p95"], per_rep["bare_activity_p95"], strict=True)
        ]
    )
    res["ratio_one_turn_run_vs_bare_workflow_p50"] = summary(
        [
            a / b
            for a, b in zip(per_rep["one_turn_run_p50"], per_rep["bare_workflow_p50"], strict=True)
        ]
    )
    res["ratio_one_turn_run_vs_bare_workflow_p95"] = summary(
        [
            a / b
            for a, b in zip(per_rep["one_turn_run_p95"], per_rep["bare_workflow_p95"], strict=True)
        ]
    )
    return res


def print_overhead(res: dict[str, Any]) -> None:
    print(
        f"\n(b) durability overhead, zero-latency model; medians over {res['reps']} repetitions "
        f"of {res['samples_per_rep']} turns / {res['run_samples']} whole workflows "
        "(min..max over repetitions)"
    )
    rows = [
        ("bare activity round trip (no-op, start->next start)", "bare_activity"),
        ("model turn: call_model (it commits the reply)", "model_turn"),
        ("  tool leg: call_tool (it commits a lone call's result)", "tool_leg"),
        ("  full tool-calling turn (model + tool)", "full_tool_turn"),
        ("bare one-activity workflow, start -> result", "bare_workflow"),
        ("one-turn run, run() -> last event", "one_turn_run"),
    ]
    for label, key in rows:
        print(f"  {label}")
        print(f"      p50 {fmt(res[key + '_p50'])}   p95 {fmt(res[key + '_p95'])}")
    for label, key, target in [
        ("model turn / bare activity round trip", "model_turn_vs_bare_activity", 1.5),
        ("one-turn run / bare one-activity workflow", "one_turn_run_vs_bare_workflow", 2.0),
    ]:
        p50, p95 = res[f"ratio_{key}_p50"], res[f"ratio_{key}_p95"]
        verdict = "within" if p50["median"] <= target else "OVER"
        print(
            f"  ratio {label}: p50 {fmt(p50, 'x', 1, 2)}, p95 {fmt(p95, 'x', 1, 2)} "
            f"[{verdict} the {target:g}x target at p50]"
        )


# -- (c) crash recovery ------------------------------------------------------------------------


class WorkerProcess:
    """A worker subprocess (this script's ``worker`` command) and the lines it prints, timed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, address: str, queue: str, store_dir: Path, call_seconds: float, passthrough: bool
    ) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            "worker",
            "--address",
            address,
            "--task-queue",
            queue,
            "--store",
            str(store_dir),
            "--call-seconds",
            str(call_seconds),
            *(["--passthrough"] if passthrough else []),
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            self.lines.append((time.perf_counter(), line.decode().strip()))
            self._changed.set()
        self._changed.set()

    async def wait_for(self, prefix: str, within: float = 60.0) -> float:
        """When the worker printed a line starting with ``prefix``."""
        deadline = time.perf_counter() + within
        while True:
            for t, line in self.lines:
                if line.startswith(prefix):
                    return t
            if self._reader.done():
                raise RuntimeError(f"worker exited before printing {prefix!r}: {self.lines}")
            self._changed.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"worker did not print {prefix!r}: {self.lines}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def when(self, prefix: str) -> float | None:
        return next((t for t, line in self.lines if line.startswith(prefix)), None)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        await self._reader


async def crash_once(
    client: Client,
    address: str,
    store_dir: Path,
    timeouts: Timeouts | None,
    call_seconds: float,
    kill_after: float,
    passthrough: bool,
    kind: str = "model",
) -> dict[str, float]:
    """One run whose worker is killed ``kill_after`` s into the model call (``kind="model"``) or
    into the slow tool (``kind="tool"``); a new worker finishes it."""
    marker = "CALL" if kind == "model" else "TOOL"
    queue = queue_name("crash")
    first = await WorkerProcess.start(address, queue, store_dir, call_seconds, passthrough)
    second: WorkerProcess | None = None
    try:
        await first.wait_for("READY")
        store = FileStore(store_dir)
        executor = TemporalExecutor(
            client, task_queue=queue, timeouts=timeouts, execution_timeout=timedelta(minutes=5)
        )
        agent = await new(f"crash-{kind}", store=store, executor=executor)
        run_id = uuid.uuid4().hex[:12]
        stream = await agent.run("tell me something long", run_id=run_id)
        handle = client.get_workflow_handle(run_workflow_id(agent.session_id, run_id))
        server_done = asyncio.create_task(handle.result())
        call_started = await first.wait_for(f"{marker} 1")
        await asyncio.sleep(max(0.0, call_started + kill_after - time.perf_counter()))
        t_kill = time.perf_counter()
        first.proc.kill()  # SIGKILL, by PID
        second = await WorkerProcess.start(address, queue, store_dir, call_seconds, passthrough)
        await first.stop()
        await server_done
        t_server = time.perf_counter()
        messages = await stream.wait()
        t_client = time.perf_counter()
        entries = await store.load_entries(agent.session_id)
        roles = [getattr(getattr(e, "message", None), "role", None) for e in entries]
        expected = ["user", "assistant"] if kind == "model" else TOOL_ROLES
        if roles != expected or len(messages) != len(expected) - 1:
            raise RuntimeError(f"unexpected store after recovery: {roles}, {len(messages)} msgs")
        ready = second.when("READY")
        recall = second.when(marker)
        return {
            "kill_to_completed": t_server - t_kill,
            "kill_to_wait_returned": t_client - t_kill,
            "kill_to_new_worker_ready": (ready - t_kill) if ready else float("nan"),
            "kill_to_call_restarted": (recall - t_kill) if recall else float("nan"),
        }
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def bench_crash(
    client: Client,
    address: str,
    root: Path,
    reps: int,
    call_seconds: float,
    kill_after: float,
    passthrough: bool,
    short_heartbeat: float,
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "reps": reps,
        "call_seconds": call_seconds,
        "kill_after": kill_after,
        "target_seconds": 5.0 + call_seconds,
    }
    settings = [("default", None), ("short", short_timeouts(short_heartbeat))]
    for (name, timeouts), kind in itertools.product(settings, ("model", "tool")):
        store_dir = root / f"crash-{name}-{kind}"
        runs = [
            await crash_once(
                client, address, store_dir, timeouts, call_seconds, kill_after, passthrough, kind
            )
            for _ in range(reps)
        ]
        t = timeouts or Timeouts()
        key = name if kind == "model" else f"{name}_tool"
        res[key] = {
            "timeouts": t.model_dump(),
            **{k: summary([r[k] for r in runs]) for k in runs[0]},
        }
    return res


def print_crash(res: dict[str, Any]) -> None:
    d = res["call_seconds"]
    print(
        f"\n(c) crash recovery: worker SIGKILLed {res['kill_after']:.1f} s into a {d:.1f} s "
        f"streaming model call / a {d:.1f} s tool, new worker subprocess started at once; "
        f"medians over {res['reps']} repetitions (min..max)"
    )
    for name in ("default", "short", "default_tool", "short_tool"):
        if name not in res:
            continue
        r = res[name]
        t = r["timeouts"]
        what = "tool" if name.endswith("_tool") else "model call"
        beat = t["tool_heartbeat"] if name.endswith("_tool") else t["model_heartbeat"]
        retry = "the tool's retry policy" if name.endswith("_tool") else "retry_initial="
        retry += "" if name.endswith("_tool") else f"{t['retry_initial']} s"
        print(
            f"  {what}, {name.removesuffix('_tool')} Timeouts (heartbeat={beat} s, "
            f"{retry}; worker sticky timeout 2 s):"
        )
        print(
            f"      kill -> new worker ready        {fmt(r['kill_to_new_worker_ready'], 's', 1, 2)}"
        )
        print(
            f"      kill -> {what + ' restarted':<24}{fmt(r['kill_to_call_restarted'], 's', 1, 2)}"
        )
        print(f"      kill -> run completed (server)  {fmt(r['kill_to_completed'], 's', 1, 2)}")
        print(f"      kill -> wait() returned         {fmt(r['kill_to_wait_returned'], 's', 1, 2)}")
        over = r["kill_to_completed"]["median"] - d
        verdict = "within" if over < 5.0 else "OVER"
        print(
            f"      recovery beyond the re-run call: {over:.2f} s [{verdict} the 5 s + call target]"
        )


# -- the worker subprocess of (c) --------------------------------------------------------------


class AnnouncingModel:
    """A ScriptedModel streaming one long reply; prints ``CALL <attempt>`` when a call starts."""

    def __init__(self, call_seconds: float) -> None:
        text = "The quick brown fox jumps over the lazy dog. " * 8  # 360 chars
        chunks = 40
        self.inner = ScriptedModel(
            lambda _request: Reply(
                text=text,
                chunk_size=len(text) // chunks,
                chunk_delay=call_seconds / chunks,
                usage=FIXED_USAGE,
            )
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        print(f"CALL {activity.info().attempt}", flush=True)
        async for event in self.inner.stream(request):
            yield event


TOOL_ROLES = ["user", "assistant", "tool_result", "assistant"]


def slow_tool(call_seconds: float) -> Any:
    """A tool that runs ``call_seconds``; prints ``TOOL <attempt>`` when an attempt starts."""

    @tool
    async def slow(k: int) -> str:
        """Works for a while."""
        print(f"TOOL {activity.info().attempt}", flush=True)
        await asyncio.sleep(call_seconds)
        return f"worked {k}"

    return slow


def tool_then_answer(request: ModelRequest) -> Reply:
    if assistant_turns(request) == 0:
        return Reply(tool_calls=[ToolCall(id="slow-1", name="slow", arguments={"k": 1})])
    return Reply(text="done")


async def worker_main(args: argparse.Namespace) -> None:
    client = await connect(args.address)
    tool_agent = AgentSpec(
        model=ScriptedModel(tool_then_answer), tools=[slow_tool(args.call_seconds)]
    )
    worker = await create_worker(
        client,
        task_queue=args.task_queue,
        store=FileStore(args.store),
        agents={
            "crash-model": AgentSpec(model=AnnouncingModel(args.call_seconds)),
            "crash-tool": tool_agent,
        },
        **worker_options(args.passthrough),
    )
    async with worker:
        print("READY", flush=True)
        await asyncio.Event().wait()


# -- before/after ------------------------------------------------------------------------------


def figures(res: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures of one run, as (label, value) rows for the side-by-side table."""
    rows: list[tuple[str, str]] = []
    h = res.get("history")
    if h:
        n = h["turns"]
        r, o = h["runs"], h["one_run"]
        rows += [
            ("(a) run() call 1: events / B", f"{r['turn1']['events']} / {r['turn1']['bytes']}"),
            (
                f"(a) run() call {n}: events / B",
                f"{r[f'turn{n}']['events']} / {r[f'turn{n}']['bytes']}",
            ),
            ("(a) model turn 1: +events / +B", f"{o['turn1']['events']} / {o['turn1']['bytes']}"),
            (
                f"(a) model turn {n}: +events / +B",
                f"{o[f'turn{n}']['events']} / {o[f'turn{n}']['bytes']}",
            ),
        ]
    b = res.get("overhead")
    if b:
        for label, key in [
            ("bare activity round trip", "bare_activity"),
            ("model turn", "model_turn"),
            ("tool leg", "tool_leg"),
            ("full tool-calling turn", "full_tool_turn"),
            ("bare one-activity workflow", "bare_workflow"),
            ("one-turn run", "one_turn_run"),
        ]:
            p50, p95 = b[key + "_p50"]["median"], b[key + "_p95"]["median"]
            rows.append((f"(b) {label} p50 / p95", f"{p50 * 1000:.1f} / {p95 * 1000:.1f} ms"))
        for label, key in [
            ("model turn / bare activity", "model_turn_vs_bare_activity"),
            ("one-turn run / bare workflow", "one_turn_run_vs_bare_workflow"),
        ]:
            p50, p95 = b[f"ratio_{key}_p50"]["median"], b[f"ratio_{key}_p95"]["median"]
            rows.append((f"(b) {label} p50 / p95", f"{p50:.2f}x / {p95:.2f}x"))
    c = res.get("crash")
    if c:
        d = c["call_seconds"]
        for key, label in [
            ("default", "model, default"),
            ("short", "model, short"),
            ("default_tool", "tool, default"),
            ("short_tool", "tool, short"),
        ]:
            if key in c:
                done = c[key]["kill_to_completed"]["median"]
                rows.append(
                    (
                        f"(c) crash {label}: kill->done (beyond call)",
                        f"{done:.2f} s ({done - d:+.2f} s)",
                    )
                )
    return rows


# -- main --------------------------------------------------------------------------------------


async def bench_main(args: argparse.Namespace) -> dict[str, Any]:
    parts = set(args.only.split(","))
    root = Path(tempfile.mkdtemp(prefix="temporal-bench-"))
    dynamic = {TRANSFER_RPS_KEY: args.transfer_rps} if args.transfer_rps else {}
    server = await start_dev_server(root / "server", dynamic_config=dynamic)
    import durable_agent

    results: dict[str, Any] = {
        "library": str(Path(durable_agent.__file__).parent),
        "server": "temporal server start-dev, SQLite + WAL",
        "store": args.store,
        "sandbox": "passthrough durable_agent" if args.passthrough else "create_worker default",
        "dynamic_config": dynamic,
    }
    print(
        f"dev server {server.address} (pid {server.pid}), data in {root}; store {args.store}; "
        f"workflow sandbox: {results['sandbox']}; dynamic config: {dynamic or 'none'}",
        flush=True,
    )
    t_all = time.perf_counter()
    try:
        client = await connect(server.address)
        store = make_store(args.store, root / "store")
        if "a" in parts:
            t0 = time.perf_counter()
            results["history"] = await bench_history(client, store, args.turns, args.passthrough)
            print_history(results["history"])
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if "b" in parts:
            t0 = time.perf_counter()
            results["overhead"] = await bench_overhead(
                client, store, args.reps, args.samples, args.run_samples, args.passthrough
            )
            print_overhead(results["overhead"])
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if "c" in parts:
            t0 = time.perf_counter()
            results["crash"] = await bench_crash(
                client,
                server.address,
                root,
                args.crash_reps,
                args.call_seconds,
                args.kill_after,
                args.passthrough,
                args.short_heartbeat,
            )
            print_crash(results["crash"])
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if "d" in parts:  # live token deltas (issue 13): bench/_delta_latency.py
            import _delta_latency

            t0 = time.perf_counter()
            results["deltas"] = await _delta_latency.bench_deltas(client, root / "deltas")
            _delta_latency.print_deltas(results["deltas"])
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        if "e" in parts:  # carried continue-as-new input (issue 16): bench/_can_size.py
            import _can_size

            t0 = time.perf_counter()
            results["can_size"] = await _can_size.bench_can_size(client, store)
            _can_size.print_can_size(results["can_size"])
            print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["seconds"] = time.perf_counter() - t_all
    print(f"\ntotal {results['seconds']:.0f} s")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    w = sub.add_parser("worker", help="(internal) the worker subprocess of the crash benchmark")
    w.add_argument("--address", required=True)
    w.add_argument("--task-queue", required=True)
    w.add_argument("--store", required=True)
    w.add_argument("--call-seconds", type=float, required=True)
    w.add_argument("--passthrough", action="store_true")
    parser.add_argument(
        "--only",
        default="a,b,c",
        help=(
            "parts: a history, b overhead, c crash recovery, d live deltas, "
            "e continue-as-new input size (default: a,b,c)"
        ),
    )
    parser.add_argument("--turns", type=int, default=100, help="(a) conversation length")
    parser.add_argument("--reps", type=int, default=3, help="(b) repetitions")
    parser.add_argument("--samples", type=int, default=30, help="(b) turns per repetition")
    parser.add_argument(
        "--run-samples", type=int, default=15, help="(b) whole workflows per repetition"
    )
    parser.add_argument("--crash-reps", type=int, default=3, help="(c) repetitions per setting")
    parser.add_argument("--call-seconds", type=float, default=2.0, help="(c) model call length")
    parser.add_argument(
        "--short-heartbeat", type=float, default=1.0, help="(c) the short model heartbeat timeout"
    )
    parser.add_argument("--kill-after", type=float, default=0.5, help="(c) kill this far in")
    parser.add_argument("--store", choices=["file", "memory"], default="file", help="(a), (b)")
    parser.add_argument(
        "--passthrough",
        action="store_true",
        help="workers pass durable_agent through the workflow sandbox (not the default)",
    )
    parser.add_argument(
        "--transfer-rps",
        type=int,
        default=1000,
        help=f"the dev server's {TRANSFER_RPS_KEY} (0: the server default, 20)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--compare",
        metavar="REV",
        help="also run the same parts against git revision REV (a worktree) and print both",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.command == "worker":
        asyncio.run(worker_main(args))
        return 0
    before = None
    if args.compare:
        before = run_against(
            SCRIPT, args.compare, sys.argv[1:] if argv is None else argv, args.keep
        )
        print("=== after: this worktree ===", flush=True)
    results = asyncio.run(bench_main(args))
    if before is not None:
        results["before"] = before
        print_side_by_side(figures(before), figures(results), before["revision"], "this worktree")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # skip interpreter teardown (a known SDK abort at exit)
