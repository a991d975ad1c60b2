"""One point of the load curve: W worker processes, S sessions of T turns, optionally one SIGKILL.

The worker processes are real ``durable-agent worker`` CLI processes on one task queue (started
and stopped by PID through :class:`tests.support.load.WorkerFleet`); the sessions run in this
process through the public client API; every figure of :mod:`_load_metrics` is taken around it.
With ``kill``, once a quarter of the runs returned and the first worker has an activity running
(seen on the server), that worker is SIGKILLed; after a further tenth of the runs returned on the
survivor alone, a replacement worker joins. The store is then audited session by session.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient
from temporalio.client import Client
from tests.support.load import (
    LoadDriver,
    WorkerFleet,
    audit,
    victim_running_activity,
    worker_identity,
)
from tests.support.worker_stats import OpCounter, read_stats, stats_after

from _load_metrics import ProcSample, mongo_ops, proc_sample, schedule_to_start
from _stats import pct
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import Timeouts

__all__ = ["Context", "run_point"]


@dataclass
class Context:
    """What every point shares: the servers, this process and the run settings."""

    client: Client
    address: str
    mongo_uri: str
    """Base ``mongodb://host:port/`` (each point gets its own database)."""
    pids: dict[str, int]
    """server, mongo and client PIDs, sampled around each point."""
    logs: Path
    turns: int
    latency: float
    timeouts: Timeouts
    tuning: dict[str, int] = field(default_factory=dict)
    budget: float | None = None
    """Seconds each curve point starts new turns for (the kill point always runs every turn)."""
    drain: float = 120.0
    """Seconds after ``budget`` a curve point still waits for the runs in flight; those left
    are reported unfinished at budget (with their server status) and terminated."""
    kill_cut: float = 300.0
    """Seconds the kill point waits for all its runs at most."""


def _db_uri(base: str, name: str) -> str:
    head, _, query = base.partition("?")
    return f"{head.rstrip('/')}/{name}" + (f"?{query}" if query else "")


def _cpu(before: ProcSample | None, after: ProcSample | None, wall: float) -> float:
    if before is None or after is None or wall <= 0:
        return float("nan")
    return 100.0 * (after.cpu_seconds - before.cpu_seconds) / wall


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, every process of every user included."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


async def _kill_and_replace(
    ctx: Context, fleet: WorkerFleet, driver: LoadDriver, res: dict[str, Any]
) -> None:
    total = driver.sessions * driver.turns
    await driver.wait_completed(max(1, total // 4), within=300)
    victim = fleet.procs[0]
    workflow_id = await victim_running_activity(ctx.client, driver, worker_identity(victim.pid))
    res["victim_sample"] = proc_sample(victim.pid)
    at_kill = driver.completed()
    fleet.kill(victim)
    t_kill = time.perf_counter()
    res["killed"] = {"pid": victim.pid, "during": workflow_id, "completed_at_kill": at_kill}
    await driver.wait_completed(at_kill + max(1, total // 10), within=300)
    res["killed"]["survivor_alone_runs"] = driver.completed() - at_kill
    res["killed"]["survivor_alone_seconds"] = time.perf_counter() - t_kill
    replacement = await fleet.start()
    res["killed"]["replacement_pid"] = replacement.pid
    res["killed"]["replacement_ready_after"] = time.perf_counter() - t_kill


def _p50_p95(seconds: list[float]) -> dict[str, float]:
    return {"p50": 1000 * pct(seconds, 0.5), "p95": 1000 * pct(seconds, 0.95)}


def _stats(fleet: WorkerFleet, index: int) -> dict[str, Any]:
    return read_stats(fleet.stats_path(index))


def _client_ops(
    fleet: WorkerFleet, own: OpCounter, finals: dict[int, dict[str, Any]] | None = None
) -> int:
    """Data commands sent so far by every store client: each worker's and this process's."""
    finals = finals or {}
    return own.count + sum(
        int((finals.get(i) or _stats(fleet, i))["ops"]) for i in range(len(fleet.procs))
    )


async def run_point(
    ctx: Context, workers: int, sessions: int, *, kill: bool = False
) -> dict[str, Any]:
    name = f"load_{workers}w{sessions}s{'k' if kill else ''}_{uuid.uuid4().hex[:6]}"
    uri = _db_uri(ctx.mongo_uri, name)
    queue = f"load-{uuid.uuid4().hex[:10]}"
    fleet = WorkerFleet(
        ctx.address, uri, queue, ctx.logs / name, latency=ctx.latency, tuning=ctx.tuning
    )
    client_ops = OpCounter()  # this process's store client; each worker counts its own
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(uri, event_listeners=[client_ops])
    res: dict[str, Any] = {
        "workers": workers,
        "sessions": sessions,
        "turns": ctx.turns,
        "kill": kill,
    }
    try:
        await asyncio.gather(*(fleet.start() for _ in range(workers)))
        store = MongoStore(mongo[name])
        budget = None if kill else ctx.budget
        cut = ctx.kill_cut if budget is None else budget + ctx.drain
        driver = LoadDriver(
            ctx.client, store, queue, sessions, ctx.turns, ctx.timeouts, budget=budget, cut=cut
        )
        first = {p.pid: proc_sample(p.pid) for p in fleet.procs}
        others = {k: proc_sample(pid) for k, pid in ctx.pids.items()}
        began = time.time()
        ops0 = client_ops.count + sum(
            [int((await stats_after(fleet.stats_path(i), began))["ops"]) for i in range(workers)]
        )
        server0, res["server_ops_source"] = await asyncio.to_thread(mongo_ops, ctx.mongo_uri)
        busy0 = _machine_busy()
        load = asyncio.create_task(driver.run())
        if kill:
            await asyncio.gather(load, _kill_and_replace(ctx, fleet, driver, res))
        await load
        wall = driver.ended - driver.started
        server1, _ = await asyncio.to_thread(mongo_ops, ctx.mongo_uri)
        busy1 = _machine_busy()
        last = {p.pid: proc_sample(p.pid) for p in fleet.procs}
        if kill:
            last[res["killed"]["pid"]] = res.pop("victim_sample")
        after = {k: proc_sample(pid) for k, pid in ctx.pids.items()}
        # every worker still running writes its counts once more, as of after the load ended
        # (a killed worker's are those of its last write)
        ended = time.time()
        finals = {
            fleet.index_of(proc): await stats_after(fleet.stats_path(fleet.index_of(proc)), ended)
            for proc in fleet.procs
            if proc.running()
        }
        res["seconds"] = wall
        res["budget_s"] = budget
        res["cut_s"] = cut
        res["turns_asked"] = len(driver.records)
        res["turns_planned"] = driver.planned
        if budget is not None and wall > budget:
            # the steady state: every session busy; the drain after the budget is left out
            res["turns_per_s"] = driver.completed_within(budget) / budget
        else:
            res["turns_per_s"] = driver.completed() / wall
        latencies = [r.latency for r in driver.records if r.returned]
        res["run_latency_s"] = {
            q: pct(latencies, v) for q, v in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
        }
        res["worker_cpu_pct"] = [
            _cpu(first.get(pid) or ProcSample(pid, 0.0, 0.0, 0.0), s, wall)
            for pid, s in last.items()
        ]
        res["worker_peak_rss_mb"] = [s.peak_rss_mb if s else float("nan") for s in last.values()]
        for key in ctx.pids:
            res[f"{key}_cpu_pct"] = _cpu(others[key], after[key], wall)
        res["machine_busy_pct"] = 200.0 * (busy1[0] - busy0[0]) / max(1.0, busy1[1] - busy0[1])
        res["mongo_ops_per_s"] = (_client_ops(fleet, client_ops, finals) - ops0) / wall
        res["server_ops_per_s"] = (server1 - server0) / wall
        wft, act_history, retried = await schedule_to_start(
            ctx.client, [r.workflow_id for r in driver.records]
        )
        waits: dict[str, list[float]] = {"tool": [], "model": []}
        for i in range(len(fleet.procs)):
            for kind, values in (finals.get(i) or _stats(fleet, i))["activity_waits"].items():
                waits.setdefault(kind, []).extend(values)
        res["wft_s2s_ms"] = _p50_p95(wft)
        res["act_s2s_ms"] = _p50_p95(waits["tool"])
        res["model_start_ms"] = _p50_p95(waits["model"])
        res["act_s2s_history_ms"] = _p50_p95(act_history)
        res["activities_retried"] = retried
        res["histories_read"] = min(len(driver.records), 300)
        res["act_eager_share"] = sum(1 for x in act_history if x < 0.001) / max(1, len(act_history))
        await driver.stop_unfinished()  # status read, then terminated: nothing writes any more
        verdict = await audit(store, driver)
        res["audit"] = {
            "runs": verdict.runs,
            "waits_returned": verdict.waits_returned,
            "failed": verdict.failed,
            "unfinished": verdict.unfinished,
            "statuses": verdict.statuses,
            "lost": verdict.lost,
            "duplicated": verdict.duplicated,
            "tool_calls": verdict.tool_calls,
            "misanswered": verdict.misanswered,
            "off_chain": verdict.off_chain,
            "unexpected": verdict.unexpected,
            "problems": verdict.problems[:10],
            "line": verdict.line(1 if kill else 0),
            "clean": verdict.clean,
            "complete": verdict.complete,
        }
        res["not_returned"] = [
            {"workflow_id": r.workflow_id, "turn": r.turn, "status": r.status, "error": r.error}
            for r in driver.records
            if not r.returned
        ]
    finally:
        fleet.stop_all()
        await mongo.drop_database(name)
        await mongo.close()
    return res
