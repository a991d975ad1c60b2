"""Figure (a) of ``temporal_bench.py``: workflow history bytes and events added per turn.

Read from the server (``fetch_history()``): over 100 sequential ``run()`` calls on one handle (each
a new run workflow), and over one run of 100 tool-calling model turns (the model answers at turn
101, ``max_turns=200``). The model is gated inside its activity, so each snapshot is taken at the
same point of every turn (``call_model`` scheduled and running, nothing after it). Turn *k*'s
increment is the history between the snapshots at model calls *k* and *k+1*: model call *k* (it
stores its reply), the tool call (it stores its result), scheduling model call *k+1*. Replies and
tool results are equal-sized, so the turn-100 increment must be within 10% of turn 1's.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from _stats import pct
from _temporal_common import (
    Gate,
    InstrumentedModel,
    agent_worker,
    answer_script,
    step,
    tool_turns_script,
)
from durable_agent import new
from durable_agent.ai import ScriptedModel
from durable_agent.session import Store
from durable_agent.workflows import AgentSpec, TemporalExecutor, run_workflow_id

__all__ = ["bench_history", "figure_rows", "print_history"]


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


def within(a: float, b: float, tolerance: float = 0.10) -> bool:
    return abs(b - a) <= tolerance * a


async def sequential_runs(
    client: Client, store: Store, executor: TemporalExecutor, turns: int
) -> dict[str, Any]:
    """One handle, ``turns`` sequential runs, each a new run workflow: each run's history."""
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
        first_wft.append(first_workflow_task(await client.get_workflow_handle(wid).fetch_history()))
    first, last = per_run[0], per_run[-1]
    return {
        "seconds": time.perf_counter() - t0,
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


async def one_long_run(
    client: Client, store: Store, executor: TemporalExecutor, gate: Gate, turns: int
) -> dict[str, Any]:
    """One run of ``turns`` tool-calling model turns (answer at turn ``turns + 1``): the history
    each turn adds, snapshotted while the gated model call of every turn waits."""
    agent = await new("tools", store=store, executor=executor, max_turns=turns * 2)
    run_id = "long"
    wid = run_workflow_id(agent.session_id, run_id)
    t0 = time.perf_counter()
    stream = await agent.run("go", run_id=run_id)
    snapshots: dict[int, tuple[int, int, int]] = {}
    for _ in range(turns + 1):
        turn = await asyncio.wait_for(gate.entered.get(), 60)
        snapshots[turn] = await history_size(client, wid)
        gate.release.put_nowait(None)
    messages = await stream.wait()
    seconds = time.perf_counter() - t0
    end = await history_size(client, wid)
    inc = [
        tuple(snapshots[k + 1][j] - snapshots[k][j] for j in range(3)) for k in range(1, turns + 1)
    ]
    t1, tn = inc[0], inc[-1]
    return {
        "seconds": seconds,
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


async def bench_history(
    client: Client, store: Store, turns: int, passthrough: bool
) -> dict[str, Any]:
    gate = Gate()
    gated = InstrumentedModel(ScriptedModel(tool_turns_script(turns)), gate)
    agents = {
        "answer": AgentSpec(model=ScriptedModel(answer_script)),
        "tools": AgentSpec(model=gated, tools=(step,), max_turns=turns * 2),
    }
    async with agent_worker(client, store, agents, passthrough) as queue:
        executor = TemporalExecutor(
            client, task_queue=queue, execution_timeout=timedelta(minutes=10)
        )
        return {
            "turns": turns,
            "runs": await sequential_runs(client, store, executor, turns),
            "one_run": await one_long_run(client, store, executor, gate, turns),
        }


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


def figure_rows(h: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures of (a), as (label, value) rows for the before/after table."""
    n = h["turns"]
    r, o = h["runs"], h["one_run"]
    return [
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
