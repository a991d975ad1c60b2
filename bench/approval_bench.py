"""Approvals and steering on Temporal: what a decision and a steer cost
(docs/design.md#approvals-and-steering).

On one dev server (SQLite + WAL), a worker in the measuring process (one clock for both ends), a
MemoryStore and a scripted model:

- **decision -> tool start**: from ``agent.decide(...)`` to the approved tool's first line on the
  worker, against a bare update round trip (an update whose handler returns at once) on the same
  server. Both are taken at the same moment of each run: once the run waits (its wait's timer is
  in history, as when a person decides seconds later), a bare update, then the decision; so
  contention from the rest of the machine weighs on both alike. Reported: p25/p50/p75/p95, the
  ratio of the p50s, and the median of the per-run ratios (decision / the bare update just
  before it). Also ``--runs`` bare updates back to back once the runs are done (the floor: a
  warm server, worker and loop, which the first update after a quiet spell does not find) and
  the decision's p50 against theirs;
- **history events per approval**: a run whose one call needs approval against the same run
  whose call does not (request and decision together);
- **no growth while waiting**: the run's history length right after ``approval_requested`` and
  again ``--idle`` seconds later (the time-skipping test in tests/temporal/test_approvals.py
  checks the same over three days);
- **steer -> stored**: from ``stream.send(...)`` to its return (the message stored and
  delivered) when the run is at a tool call that finishes as the steer is sent.

``--before REV`` also measures durable-agent as of ``REV`` (a temporary ``git worktree`` of it
first on a subprocess's ``PYTHONPATH``) on the same server, so the figures print side by side;
``--rounds N`` runs each side N times, alternating which goes first, and pools the samples.

Run: ``.venv/bin/python bench/approval_bench.py [--runs 30] [--idle 3] [--before REV]
[--rounds 2]``; writes ``bench/results/approvals.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from _bare_update import BareUpdates  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from _stats import pct  # noqa: E402

CLIENT: list[Any] = []
STARTED: list[float] = []
STARTED_NOW = asyncio.Event()
RELEASE = asyncio.Event()


def tools() -> tuple[Any, ...]:
    from durable_agent import tool

    @tool(approval=True)
    async def gated(n: int) -> str:
        """A call a person approves."""
        STARTED.append(time.perf_counter())
        STARTED_NOW.set()
        return f"ran {n}"

    @tool
    async def free(n: int) -> str:
        """The same call, needing no approval."""
        return f"ran {n}"

    @tool
    async def hold(n: int) -> str:
        """A call that finishes when the steer is sent."""
        await RELEASE.wait()
        return f"held {n}"

    return gated, free, hold


def script(name: str) -> Any:
    """A scripted model as a function of the request: a call of ``name`` after each question,
    then a short answer (so a late steer's extra model call never runs out of script)."""
    from durable_agent import Reply, ToolCall

    def respond(request: Any) -> Any:
        last = request.messages[-1]
        if last.role == "user" and not last.text().startswith("also"):
            call = ToolCall(id=f"{name}{len(request.messages)}", name=name, arguments={"n": 1})
            return Reply(tool_calls=[call])
        return Reply(text="done")

    return respond


async def history_length(client: Any, session_id: str, run_id: str, timer: bool = False) -> int:
    """Events in the run's history; ``timer``: once the wait's timer is in it (the client sees
    the requests in the store a moment before the workflow task that starts the wait ends)."""
    from temporalio.api.enums.v1 import EventType

    from durable_agent.workflows import run_workflow_id

    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id))
    for _ in range(1000):
        events = (await handle.fetch_history()).events
        if not timer or any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events):
            return len(events)
    raise RuntimeError("the wait's timer never started")


async def until(stream: Any, kind: str) -> Any:
    """Read events until one of ``kind``; returns the events iterator to finish later."""
    events = stream.events()
    async for event in events:
        if event.agent is not None and event.agent.type == kind:
            return events
    raise RuntimeError(f"the run ended without {kind}")


async def decisions(client: Any, agent: Any, queue: str, runs: int, idle: float) -> dict[str, Any]:
    """Per run: once it waits, a bare update, then the decision (see the module docstring)."""
    bare = await client.start_workflow(
        BareUpdates.run, id=f"bare-{uuid.uuid4().hex}", task_queue=queue
    )
    took: list[float] = []
    baseline: list[float] = []
    lengths: tuple[int, int] = (0, 0)
    for i in range(runs):
        stream = await agent.run(f"go {i}")
        events = await until(stream, "approval_requested")
        # the run waits: the workflow task that started its wait is complete
        first = await history_length(client, agent.session_id, stream.run_id, timer=True)
        if i == 0:
            await asyncio.sleep(idle)  # nobody decides: the history must not grow
            lengths = (first, await history_length(client, agent.session_id, stream.run_id))
        t0 = time.perf_counter()
        await bare.execute_update(BareUpdates.ping, i)
        baseline.append(time.perf_counter() - t0)
        STARTED.clear()
        STARTED_NOW.clear()
        t0 = time.perf_counter()
        await agent.decide(agent.pending_approvals()[0].tool_call_id, True)
        await STARTED_NOW.wait()  # the tool runs in this process
        took.append(STARTED[0] - t0)
        async for _ in events:
            pass
    back_to_back: list[float] = []
    for i in range(runs):
        t0 = time.perf_counter()
        await bare.execute_update(BareUpdates.ping, i)
        back_to_back.append(time.perf_counter() - t0)
    await bare.execute_update(BareUpdates.stop)
    return {
        "took": took,
        "bare": baseline,
        "bare_back_to_back": back_to_back,
        "waiting_history": lengths,
    }


async def events_per_approval(client: Any, make: Any) -> int:
    lengths: dict[str, int] = {}
    for name in ("gated", "free"):
        agent = await make(name, 1)
        stream = await agent.run("once")
        if name == "gated":
            events = await until(stream, "approval_requested")
            await agent.decide(agent.pending_approvals()[0].tool_call_id, True)
            async for _ in events:
                pass
        else:
            await stream.wait()
        lengths[name] = await history_length(client, agent.session_id, stream.run_id)
    return lengths["gated"] - lengths["free"]


async def queued(agent: Any, stream: Any) -> None:
    from durable_agent.activities.run_contracts import RunState
    from durable_agent.workflows import run_workflow_id

    client = CLIENT[0]
    handle = client.get_workflow_handle(run_workflow_id(agent.session_id, stream.run_id))
    for _ in range(5000):  # a query per round trip until the run holds the steer
        if (await handle.query("state", result_type=RunState)).queued_inputs:
            return


async def steers(agent: Any, runs: int) -> list[float]:
    took: list[float] = []
    for i in range(runs):
        RELEASE.clear()
        stream = await agent.run(f"hold {i}")
        events = await until(stream, "tool_execution_start")
        t0 = time.perf_counter()
        sending = asyncio.ensure_future(stream.send("also this"))
        await queued(agent, stream)  # the run holds it: it lands after this call's result
        RELEASE.set()
        await sending
        took.append(time.perf_counter() - t0)
        async for _ in events:
            pass
    return took


async def measure(address: str, runs: int, idle: float) -> dict[str, Any]:
    """One side's raw samples, with durable-agent from whatever is first on ``sys.path``."""
    from temporalio.worker import Worker

    from durable_agent import ScriptedModel, new
    from durable_agent.stores import MemoryStore
    from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker

    client = await connect(address)
    CLIENT.append(client)
    store, queue = MemoryStore(), f"approvals-{uuid.uuid4().hex[:8]}"
    gated, free, hold = tools()
    agents = {
        n: AgentSpec(model=ScriptedModel(script(n)), tools=(t,))
        for n, t in (("gated", gated), ("free", free), ("hold", hold))
    }
    worker = await create_worker(client, task_queue=queue, store=store, agents=agents)
    bare = Worker(client, task_queue=f"{queue}-bare", workflows=[BareUpdates])
    async with worker, bare:

        async def make(name: str, _runs: int) -> Any:
            return await new(name, store=store, executor=TemporalExecutor(client, task_queue=queue))

        decided = await decisions(client, await make("gated", runs), f"{queue}-bare", runs, idle)
        per_approval = await events_per_approval(client, make)
        steered = await steers(await make("hold", runs), runs)
    return {**decided, "per_approval": per_approval, "steers": steered}


def spread(xs: list[float]) -> dict[str, float]:
    """Milliseconds: p25, p50, p75, p95 and the count."""
    qs = {"p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95}
    return {k: round(1000 * pct(xs, q), 2) for k, q in qs.items()} | {"n": len(xs)}


def figures(samples: list[dict[str, Any]], idle: float) -> dict[str, Any]:
    """Pooled figures of one side's rounds."""
    took = [t for s in samples for t in s["took"]]
    bare = [t for s in samples for t in s["bare"]]
    back_to_back = [t for s in samples for t in s["bare_back_to_back"]]
    paired = [t / b for s in samples for t, b in zip(s["took"], s["bare"], strict=True)]
    waiting = samples[0]["waiting_history"]
    return {
        "decision_to_tool_start_ms": spread(took),
        "bare_update_ms": spread(bare),
        "bare_update_back_to_back_ms": spread(back_to_back),
        "ratio_p50": round(pct(took, 0.5) / pct(bare, 0.5), 2),
        "ratio_per_run_median": round(pct(paired, 0.5), 2),
        "ratio_p50_to_back_to_back": round(pct(took, 0.5) / pct(back_to_back, 0.5), 2),
        "history_events_per_approval": samples[0]["per_approval"],
        "history_while_waiting": {"at_0s": waiting[0], f"after_{idle:g}s": waiting[1]},
        "steer_to_stored_ms": spread([t for s in samples for t in s["steers"]]),
    }


def run_side(tree: Path, address: str, args: argparse.Namespace) -> dict[str, Any]:
    """One side in a subprocess, durable-agent imported from ``tree/src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(HERE)])}
    command = [sys.executable, __file__, "--side", "--address", address]
    command += ["--runs", str(args.runs), "--idle", str(args.idle)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"side {tree} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


async def compare(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="approval-bench-"))
    server = await start_dev_server(root / "server")
    trees = {"now": REPO}
    revisions = {
        "now": git("rev-parse", "HEAD")
        + (" (dirty)" if git("status", "--porcelain", "--", ".", ":!bench/results") else "")
    }
    if args.before:
        revisions["before"] = git("rev-parse", args.before)
        trees["before"] = root / "before"
        git("worktree", "add", "--detach", str(trees["before"]), revisions["before"])
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    try:
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                samples[name].append(
                    await asyncio.to_thread(run_side, trees[name], server.address, args)
                )
    finally:
        server.stop()
        if args.before:
            git("worktree", "remove", "--force", str(trees["before"]))
        shutil.rmtree(root, ignore_errors=True)
    out = {name: figures(samples[name], args.idle) for name in ("before", "now") if name in samples}
    return {"runs": args.runs, "rounds": args.rounds, "revisions": revisions, **out}


def show(report: dict[str, Any]) -> None:
    sides = [n for n in ("before", "now") if n in report]
    print(f"{report['runs']} runs x {report['rounds']} rounds per side; ms (p25 / p50 / p75 / p95)")
    for key, label in (
        ("decision_to_tool_start_ms", "decision -> tool start"),
        ("bare_update_ms", "bare update"),
        ("bare_update_back_to_back_ms", "bare, back to back"),
        ("steer_to_stored_ms", "steer -> stored"),
    ):
        for name in sides:
            f = report[name][key]
            cells = " / ".join(f"{f[q]:.1f}" for q in ("p25", "p50", "p75", "p95"))
            print(f"  {label:<24} {name:<7} {cells}")
    for name in sides:
        f = report[name]
        print(
            f"  {name:<7} ratio p50 {f['ratio_p50']:.2f}  per-run ratio median "
            f"{f['ratio_per_run_median']:.2f}  to back to back "
            f"{f['ratio_p50_to_back_to_back']:.2f}  history events per approval "
            f"{f['history_events_per_approval']}  while waiting {f['history_while_waiting']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--idle", type=float, default=3.0)
    parser.add_argument("--before", metavar="REV", help="also measure durable-agent as of REV")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side, pooled")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        raw = asyncio.run(measure(args.address, args.runs, args.idle))
        print(json.dumps(raw))
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown (the Temporal SDK can abort at exit)
    report = asyncio.run(compare(args))
    show(report)
    out = HERE / "results" / "approvals.json"
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
