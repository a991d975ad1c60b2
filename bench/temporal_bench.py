"""Benchmark: the Temporal executor on a real dev server (SQLite + WAL) this script starts itself.

One figure a module, run here in turn (``--only``, default ``a,b,c``):

(a) ``_history_per_turn.py``: workflow history bytes and events added per turn, over 100
    sequential ``run()`` calls and over one run of 100 tool-calling model turns.
(b) ``_turn_overhead.py``: durability overhead per model turn (zero-latency model) against a bare
    one-activity workflow round trip, and a one-turn run against a bare one-activity workflow.
(c) ``_crash_recovery.py``: a worker SIGKILLed mid model call / mid tool, a new one started at
    once; kill -> run completed, with default and short ``Timeouts``.
(d) ``_delta_latency.py``: live token deltas; (e) ``_can_size.py``: continue-as-new input size.
What they share (models, tool, worker, formatting) is in ``_temporal_common.py``.

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
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from durable_agent.workflows import connect

SCRIPT = Path(__file__).resolve()
BENCH_DIR = SCRIPT.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

import _crash_recovery  # noqa: E402
import _history_per_turn  # noqa: E402
import _turn_overhead  # noqa: E402
from _compare import print_side_by_side, run_against  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from _temporal_common import TRANSFER_RPS_KEY, make_store  # noqa: E402


def figures(res: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures of one run, as (label, value) rows for the side-by-side table."""
    rows: list[tuple[str, str]] = []
    for key, module in [
        ("history", _history_per_turn),
        ("overhead", _turn_overhead),
        ("crash", _crash_recovery),
    ]:
        if res.get(key):
            rows += module.figure_rows(res[key])
    return rows


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
            history = _history_per_turn.bench_history(client, store, args.turns, args.passthrough)
            await timed(results, "history", history, _history_per_turn.print_history)
        if "b" in parts:
            overhead = _turn_overhead.bench_overhead(
                client, store, args.reps, args.samples, args.run_samples, args.passthrough
            )
            await timed(results, "overhead", overhead, _turn_overhead.print_overhead)
        if "c" in parts:
            crash = _crash_recovery.bench_crash(
                client,
                server.address,
                root,
                args.crash_reps,
                args.call_seconds,
                args.kill_after,
                args.passthrough,
                args.short_heartbeat,
            )
            await timed(results, "crash", crash, _crash_recovery.print_crash)
        if "d" in parts:  # imported here: it needs the library's live-delta channel
            import _delta_latency

            deltas = _delta_latency.bench_deltas(client, root / "deltas")
            await timed(results, "deltas", deltas, _delta_latency.print_deltas)
        if "e" in parts:  # imported here: it reads the library's wire contracts
            import _can_size

            can_size = _can_size.bench_can_size(client, store)
            await timed(results, "can_size", can_size, _can_size.print_can_size)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["seconds"] = time.perf_counter() - t_all
    print(f"\ntotal {results['seconds']:.0f} s")
    return results


async def timed(
    results: dict[str, Any],
    key: str,
    part: Coroutine[Any, Any, dict[str, Any]],
    show: Callable[[dict[str, Any]], None],
) -> None:
    """Run one figure's ``part``, keep its result under ``key``, print it and its seconds."""
    t0 = time.perf_counter()
    results[key] = await part
    show(results[key])
    print(f"  [{time.perf_counter() - t0:.0f} s]", flush=True)


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
        "--before",
        "--compare",
        dest="compare",
        metavar="REV",
        help="also run the same parts against git revision REV (a worktree) and print both",
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.command == "worker":
        asyncio.run(_crash_recovery.worker_main(args))
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
