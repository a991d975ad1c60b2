"""Figure (b) of ``temporal_bench.py``: durability overhead per model turn, zero-latency model.

Against a bare one-activity workflow (``bench/_bare_workflow.py``) on the same server, worker and
process, interleaved. A model turn is the ``call_model`` activity, which stores the reply itself
(+ the workflow tasks around it), measured worker-side from the model call's start to the tool's
start, while the client streams events; the baseline is one no-op activity round trip measured
the same way (start to next start). Also: a whole one-turn run (``run()`` ->
last event) against a whole one-activity workflow (start -> result).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

import _bare_workflow
from _stats import pct, summary
from _temporal_common import (
    TOOL_STARTS,
    InstrumentedModel,
    agent_worker,
    answer_script,
    fmt,
    queue_name,
    step,
    tool_turns_script,
)
from durable_agent import new
from durable_agent.ai import ScriptedModel
from durable_agent.session import Store
from durable_agent.workflows import AgentSpec, TemporalExecutor

__all__ = ["bench_overhead", "figure_rows", "print_overhead"]

ROWS = [  # (label, key): every measured leg, in print order
    ("bare activity round trip (no-op, start->next start)", "bare_activity"),
    ("model turn: call_model (it commits the reply)", "model_turn"),
    ("  tool leg: call_tool (it commits a lone call's result)", "tool_leg"),
    ("  full tool-calling turn (model + tool)", "full_tool_turn"),
    ("bare one-activity workflow, start -> result", "bare_workflow"),
    ("one-turn run, run() -> last event", "one_turn_run"),
]
RATIOS = [  # (label, numerator, denominator, target at p50)
    ("model turn / bare activity round trip", "model_turn", "bare_activity", 1.5),
    ("one-turn run / bare one-activity workflow", "one_turn_run", "bare_workflow", 2.0),
]


def gaps(xs: Sequence[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(xs)]


async def bare_round_trips(client: Client, bare_queue: str, samples: int) -> list[float]:
    """One no-op activity round trip inside a workflow (start to next start), ``samples`` times."""
    _bare_workflow.STARTS.clear()
    await client.execute_workflow(
        "bench.bare", samples + 1, id=queue_name("bare-seq"), task_queue=bare_queue, result_type=int
    )
    return gaps(_bare_workflow.STARTS)


async def tool_turn_legs(
    store: Store, executor: TemporalExecutor, model: InstrumentedModel, samples: int
) -> dict[str, list[float]]:
    """One run of ``samples`` tool turns, the client streaming its events: each leg's seconds."""
    model.starts.clear()
    TOOL_STARTS.clear()
    agent = await new("turns", store=store, executor=executor, max_turns=samples * 2)
    stream = await agent.run("go")
    async for _event in stream.events():
        pass
    m, t = list(model.starts), list(TOOL_STARTS)
    return {
        "model_turn": [t[k] - m[k] for k in range(samples)],  # model + append (+ tool sched.)
        "tool_leg": [m[k + 1] - t[k] for k in range(samples)],  # tool + append
        "full_tool_turn": gaps(m),
    }


async def whole_workflows(
    client: Client, bare_queue: str, store: Store, executor: TemporalExecutor, run_samples: int
) -> dict[str, list[float]]:
    """A bare one-activity workflow and a one-turn run, interleaved, ``run_samples`` each."""
    bare_wf: list[float] = []
    one_turn: list[float] = []
    single = await new("answer", store=store, executor=executor)
    for i in range(run_samples):
        t0 = time.perf_counter()
        await client.execute_workflow(
            "bench.bare", 1, id=queue_name("bare-one"), task_queue=bare_queue, result_type=int
        )
        bare_wf.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        stream = await single.run(f"question {i:04d}")
        async for _event in stream.events():
            pass
        one_turn.append(time.perf_counter() - t0)
    return {"bare_workflow": bare_wf, "one_turn_run": one_turn}


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

    def record(legs: dict[str, list[float]]) -> None:
        for name, xs in legs.items():
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
            record({"bare_activity": await bare_round_trips(client, bare_queue, samples)})
            record(await tool_turn_legs(store, executor, model, samples))
            record(await whole_workflows(client, bare_queue, store, executor, run_samples))

    res: dict[str, Any] = {"reps": reps, "samples_per_rep": samples, "run_samples": run_samples}
    for key, values in per_rep.items():
        res[key] = summary(values)
    for _label, num, den, _target in RATIOS:
        for p in ("p50", "p95"):
            pairs = zip(per_rep[f"{num}_{p}"], per_rep[f"{den}_{p}"], strict=True)
            res[f"ratio_{num}_vs_{den}_{p}"] = summary([a / b for a, b in pairs])
    return res


def print_overhead(res: dict[str, Any]) -> None:
    print(
        f"\n(b) durability overhead, zero-latency model; medians over {res['reps']} repetitions "
        f"of {res['samples_per_rep']} turns / {res['run_samples']} whole workflows "
        "(min..max over repetitions)"
    )
    for label, key in ROWS:
        print(f"  {label}")
        print(f"      p50 {fmt(res[key + '_p50'])}   p95 {fmt(res[key + '_p95'])}")
    for label, num, den, target in RATIOS:
        p50, p95 = res[f"ratio_{num}_vs_{den}_p50"], res[f"ratio_{num}_vs_{den}_p95"]
        verdict = "within" if p50["median"] <= target else "OVER"
        print(
            f"  ratio {label}: p50 {fmt(p50, 'x', 1, 2)}, p95 {fmt(p95, 'x', 1, 2)} "
            f"[{verdict} the {target:g}x target at p50]"
        )


def figure_rows(b: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures of (b), as (label, value) rows for the before/after table."""
    rows: list[tuple[str, str]] = []
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
    for label, num, den in [
        ("model turn / bare activity", "model_turn", "bare_activity"),
        ("one-turn run / bare workflow", "one_turn_run", "bare_workflow"),
    ]:
        p50, p95 = (
            b[f"ratio_{num}_vs_{den}_p50"]["median"],
            b[f"ratio_{num}_vs_{den}_p95"]["median"],
        )
        rows.append((f"(b) {label} p50 / p95", f"{p50:.2f}x / {p95:.2f}x"))
    return rows
