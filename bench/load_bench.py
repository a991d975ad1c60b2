"""Benchmark: many sessions on several worker processes, and a worker SIGKILLed under load.

A real Temporal dev server (SQLite + WAL) and a FerretDB are started here on loopback; each point
of the curve starts W ``durable-agent worker`` processes (the CLI, serving
``tests/support/load_app.py``) on a fresh task queue and database, and runs S sessions of T turns
concurrently through the public client API (``new`` / ``run`` / ``wait``) from this process. The
model is a ScriptedModel waiting ``--latency`` per call (default 200 ms); every third turn it calls
a tool first, so a tool turn is two model calls and one tool call.

Per point it prints turns/s (runs returned per second while every session was busy), run latency
p50/p95/p99 (``run()`` to ``wait()`` returned), workflow-task schedule-to-start p50/p95 (from the
runs' histories), activity schedule-to-start p50/p95 (the server's scheduled time of each tool
attempt to its code running on a worker, noted by the load agent: history's
``ActivityTaskStarted`` reads 0 for eagerly dispatched activities), CPU% (100 = one core) of each
worker, the server, FerretDB and this client process, the workers' peak RSS, Mongo ops/s (data
commands counted by a PyMongo ``CommandListener`` in every store client: the workers' and this
process's), and the whole machine's busy % of its cores (other users of a shared machine
included). Then the kill point: 2 workers, 50 sessions of all their turns, the first worker
SIGKILLed mid-activity, a replacement joining later; the store audit prints
``runs <n> kills <k> lost <l> duplicated <d>``. Every point is audited the same way.

Bounded: each curve point starts new turns for ``--point-seconds`` (default 20), then waits at
most ``--drain-seconds`` (default 120) for the runs in flight; each run has an execution timeout,
and the whole script stops itself after ``--max-seconds``; everything it started is stopped by
PID. The audit counts only the turns the client asked for: a turn never started because the
budget was spent is not lost, and a point whose budget cut its load short says so on its own
line (turns asked for of S x T; runs unfinished at budget, with their status on the server, are
terminated and counted apart from failed runs). The default curve plus the kill point takes
about 4 to 5 minutes on 2 cores (more on a busy machine).

Run: ``make bench-load`` or ``.venv/bin/python bench/load_bench.py [--json PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for path in (BENCH_DIR, BENCH_DIR.parent):  # _servers, _load_*; tests.support
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.support.ferretdb import start_ferretdb  # noqa: E402

from _load_point import Context, run_point  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from durable_agent.workflows import Timeouts, connect  # noqa: E402

TIMEOUTS = Timeouts(
    model_heartbeat=5.0,
    store_heartbeat=5.0,
    tool_heartbeat=5.0,
    retry_initial=0.2,
    retry_max=2.0,
)
"""Heartbeats short enough that a killed worker's activities move within seconds, long enough
that a saturated worker still heartbeats in time."""

HEADER = (
    f"{'W':>2} {'S':>4} {'runs':>5} {'turns/s':>7} {'run p50/p95/p99 s':>18} "
    f"{'wft s2s ms':>11} {'act s2s ms':>11} {'worker CPU%':>12} {'wRSS MB':>8} "
    f"{'srv%':>5} {'mdb%':>5} {'cli%':>5} {'box%':>5} {'mdb ops/s':>9}"
)


def _row(r: dict[str, Any]) -> str:
    lat, wft, act = r["run_latency_s"], r["wft_s2s_ms"], r["act_s2s_ms"]
    cpu = "/".join(f"{c:.0f}" for c in r["worker_cpu_pct"])
    rss = max(r["worker_peak_rss_mb"])
    return (
        f"{r['workers']:>2} {r['sessions']:>4} {r['audit']['runs']:>5} {r['turns_per_s']:>7.1f} "
        f"{lat['p50']:>6.2f}/{lat['p95']:.2f}/{lat['p99']:.2f} "
        f"{wft['p50']:>5.0f}/{wft['p95']:<5.0f} {act['p50']:>5.0f}/{act['p95']:<5.0f} "
        f"{cpu:>12} {rss:>8.0f} {r['server_cpu_pct']:>5.0f} {r['mongo_cpu_pct']:>5.0f} "
        f"{r['client_cpu_pct']:>5.0f} {r['machine_busy_pct']:>5.0f} {r['mongo_ops_per_s']:>9.0f}"
    )


def _print_kill(r: dict[str, Any]) -> None:
    k = r["killed"]
    print(
        f"  SIGKILL worker {k['pid']} mid-activity ({k['during']}) after "
        f"{k['completed_at_kill']} runs; the survivor alone returned "
        f"{k['survivor_alone_runs']} runs in {k['survivor_alone_seconds']:.1f} s; replacement "
        f"{k['replacement_pid']} ready {k['replacement_ready_after']:.1f} s after the kill"
    )


def _statuses(a: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(a["statuses"].items()))


def _print_audit(r: dict[str, Any]) -> None:
    """The store audit of a point, and plainly whether its budget cut the load short."""
    a = r["audit"]
    failed = f"failed {a['failed']}"
    unfinished = f"unfinished at budget {a['unfinished']}"
    if a["statuses"]:
        note = f" (server: {_statuses(a)})"
        failed, unfinished = (
            (failed + note, unfinished) if a["failed"] else (failed, unfinished + note)
        )
    print(
        f"  {a['line']}  | waits returned {a['waits_returned']}/{a['runs']}, {failed}, "
        f"{unfinished}; tool calls {a['tool_calls']} (not answered exactly once: "
        f"{a['misanswered']}), off-chain {a['off_chain']}, unexpected {a['unexpected']}; "
        f"activities on a retry {r['activities_retried']} (of {r['histories_read']} runs read)"
    )
    if r["turns_asked"] < r["turns_planned"] or a["unfinished"]:
        print(
            f"  budget hit: {r['turns_asked']} of {r['turns_planned']} turns asked for (new "
            f"turns for {r['budget_s'] or 0:.0f} s, waits cut at {r['cut_s']:.0f} s); the rest "
            "were never started, so they are neither lost nor counted"
        )
    for problem in a["problems"]:
        print(f"    ! {problem}")


async def _points(ctx: Context, args: argparse.Namespace, results: dict[str, Any]) -> None:
    print(HEADER, flush=True)
    for w in args.workers:
        for s in args.sessions:
            r = await run_point(ctx, w, s)
            results["points"].append(r)
            print(_row(r), flush=True)
            _print_audit(r)
    if args.kill_sessions:
        print(f"\nworker killed under load (2 workers, {args.kill_sessions} sessions):")
        print(HEADER)
        r = await run_point(ctx, 2, args.kill_sessions, kill=True)
        results["kill"] = r
        print(_row(r))
        _print_kill(r)
        _print_audit(r)


async def bench_main(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="load-bench-"))
    server = await start_dev_server(
        root / "server", dynamic_config={"history.transferProcessorMaxPollRPS": 1000}
    )
    ferret = await asyncio.to_thread(start_ferretdb, root / "ferretdb")
    results: dict[str, Any] = {"points": [], "latency_s": args.latency, "turns": args.turns}
    try:
        ctx = Context(
            client=await connect(server.address),
            address=server.address,
            mongo_uri=ferret.uri,
            pids={"server": server.pid, "mongo": ferret.pid or 0, "client": os.getpid()},
            logs=root / "logs",
            turns=args.turns,
            latency=args.latency,
            timeouts=TIMEOUTS,
            tuning=args.tuning,
            budget=args.point_seconds or None,
            drain=args.drain_seconds,
        )
        print(
            f"Temporal dev server {server.address} (pid {server.pid}), FerretDB {ferret.uri} "
            f"(pid {ferret.pid}); model latency {args.latency * 1000:.0f} ms, {args.turns} turns "
            f"per session, a tool every third turn; tuning {args.tuning or 'defaults'}; "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(_points(ctx, args, results), args.max_seconds)
        except TimeoutError:
            if time.perf_counter() - t0 < args.max_seconds:
                raise  # a point's own timeout, not the script's budget: say what it was
            results["stopped"] = f"--max-seconds {args.max_seconds:.0f} reached"
            print(f"\nstopped: --max-seconds {args.max_seconds:.0f} reached", flush=True)
        results["seconds"] = time.perf_counter() - t0
        print(
            f"\nturns/s over the first {args.point_seconds:.0f} s of each curve point (every "
            "session busy; the kill point: all its turns over its wall time). wft s2s from the "
            "runs' histories; act s2s = a tool attempt's scheduled time (server) to its code "
            "running on a worker (history stamps eager dispatch as 0 wait). CPU% = share of one "
            "core over the point (W worker processes each); box% = the whole machine busy, of "
            f"{os.cpu_count()} cores x 100. mdb ops/s = data commands (insert/find/update/delete/"
            "findAndModify/aggregate/getMore) counted by a PyMongo CommandListener in every "
            "store client (each worker's and this process's), not from the server (FerretDB has "
            f"no serverStatus opcounters). total {results['seconds']:.0f} s"
        )
    finally:
        ferret.stop()
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return results


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _no_nan(value: Any) -> Any:
    """``value`` with every float NaN (an empty percentile) as ``None``."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nan(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=_ints, default=[1, 2], help="default 1,2")
    parser.add_argument("--sessions", type=_ints, default=[10, 50, 200], help="default 10,50,200")
    parser.add_argument("--turns", type=int, default=3, help="turns per session (default 3)")
    parser.add_argument("--latency", type=float, default=0.2, help="model call seconds")
    parser.add_argument(
        "--kill-sessions", type=int, default=50, help="sessions of the kill point (0: skip it)"
    )
    parser.add_argument("--max-concurrent-activities", type=int)
    parser.add_argument("--max-concurrent-workflow-tasks", type=int)
    parser.add_argument("--max-cached-workflows", type=int)
    parser.add_argument(
        "--point-seconds",
        type=float,
        default=20.0,
        help="seconds each curve point starts new turns for (default 20; 0: all turns)",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=120.0,
        help="seconds a curve point then waits for its runs in flight (default 120); those "
        "left are reported as unfinished at budget, with their server status",
    )
    parser.add_argument("--max-seconds", type=float, default=900.0, help="stop after this")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    args.tuning = {
        k: getattr(args, k)
        for k in (
            "max_concurrent_activities",
            "max_concurrent_workflow_tasks",
            "max_cached_workflows",
        )
        if getattr(args, k) is not None
    }
    results = asyncio.run(bench_main(args))
    if args.json:
        # strict JSON (jq and browsers refuse NaN): a figure with no sample is null
        args.json.write_text(json.dumps(_no_nan(results), indent=2, default=str))
        print(f"figures written to {args.json}")
    ok = all(p["audit"]["clean"] for p in results["points"]) and (
        "kill" not in results or results["kill"]["audit"]["complete"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # skip interpreter teardown (a known SDK abort at exit)
