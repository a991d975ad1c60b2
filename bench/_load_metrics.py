"""Measurements of the load benchmark: process CPU and RSS, schedule-to-start, Mongo ops.

- **CPU and RSS** come from ``/proc/<pid>/stat`` (user + system ticks) and ``/proc/<pid>/status``
  (``VmRSS`` now, ``VmHWM`` peak), read before and after a point, so a process's CPU% over the
  point is its ticks over the wall time (100% = one core).
- **Workflow-task schedule-to-start** comes from each run's history on the server:
  ``WorkflowTaskScheduled`` to its ``WorkflowTaskStarted`` (stamped when a worker polled the
  task). Histories are read after the point, so reading them does not load the measurement. The
  same pairs for activities are kept as ``act_s2s_history_ms``, with the share that read 0: the
  SDK dispatches an activity eagerly (in the workflow task's reply) when the worker has a free
  slot, and history stamps that as started at once. The printed activity figure is measured in
  the worker instead (:mod:`tests.support.worker_stats`).
- **Mongo ops/s** are counted in the clients (``tests.support.worker_stats.OpCounter``, a PyMongo
  ``CommandListener``). The server's own figure is kept as a cross-check (``server_ops_per_s``):
  MongoDB's ``serverStatus.opcounters``, or FerretDB's ``metrics.commands.<name>.total`` (it
  has no opcounters), of which the data commands are summed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

__all__ = ["ProcSample", "mongo_ops", "proc_sample", "schedule_to_start"]

TICKS = os.sysconf("SC_CLK_TCK")
DATA_COMMANDS = frozenset(
    {
        "insert",
        "find",
        "update",
        "delete",
        "findandmodify",
        "findAndModify",
        "aggregate",
        "getMore",
        "count",
        "distinct",
    }
)


@dataclass(frozen=True)
class ProcSample:
    pid: int
    cpu_seconds: float
    rss_mb: float
    peak_rss_mb: float


def proc_sample(pid: int) -> ProcSample | None:
    """CPU seconds so far and memory of ``pid``; ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    mem = {
        line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Vm")
    }
    return ProcSample(pid, cpu, int(mem.get("VmRSS", 0)) / 1024, int(mem.get("VmHWM", 0)) / 1024)


def mongo_ops(uri: str) -> tuple[int, str]:
    """Data operations the server has served so far, and where the figure comes from."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    with client:
        status = client.admin.command("serverStatus")
    counters = status.get("opcounters")
    if isinstance(counters, dict):
        keys = ("insert", "query", "update", "delete", "getmore")
        return sum(int(counters.get(k, 0)) for k in keys), "serverStatus opcounters"
    commands = status.get("metrics", {}).get("commands", {})
    total = sum(
        int(v.get("total", 0))
        for k, v in commands.items()
        if k in DATA_COMMANDS and isinstance(v, dict)
    )
    return total, "FerretDB serverStatus metrics.commands (no opcounters)"


async def _latencies(client: Client, workflow_id: str) -> tuple[list[float], list[float], int]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    scheduled: dict[int, float] = {}
    wft: list[float] = []
    act: list[float] = []
    retried = 0
    for event in history.events:
        t = event.event_time.ToDatetime().timestamp()
        if event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        ):
            scheduled[event.event_id] = t
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sid = event.workflow_task_started_event_attributes.scheduled_event_id
            if sid in scheduled:
                wft.append(t - scheduled[sid])
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            retried += started.attempt > 1
            if started.scheduled_event_id in scheduled:
                act.append(t - scheduled[started.scheduled_event_id])
    return wft, act, retried


async def schedule_to_start(
    client: Client, workflow_ids: Iterable[str], *, limit: int = 300, concurrency: int = 8
) -> tuple[list[float], list[float], int]:
    """Workflow-task and activity schedule-to-start latencies (seconds) over up to ``limit``
    runs' histories, read ``concurrency`` at a time, and how many of their activities ended
    on a later attempt (an attempt failed or timed out first: a heartbeat missed under load)."""
    ids: Sequence[str] = list(workflow_ids)
    if len(ids) > limit:  # an even spread over the point, not just its start
        step = len(ids) / limit
        ids = [ids[int(i * step)] for i in range(limit)]
    gate = asyncio.Semaphore(concurrency)

    async def one(wid: str) -> tuple[list[float], list[float], int]:
        async with gate:
            return await _latencies(client, wid)

    results = await asyncio.gather(*(one(w) for w in ids))
    return (
        [x for r in results for x in r[0]],
        [x for r in results for x in r[1]],
        sum(r[2] for r in results),
    )
