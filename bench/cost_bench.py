"""Billable Temporal actions, client CPU and worker CPU per conversation turn: durable-agent vs
Pydantic AI's Temporal integration (``TemporalDurability``), side by side in one run.

Workload: 20-turn conversations (``--turns``), a tool call every 5th turn, the ``bench/peers``
code on both sides (``peers/_cost_side.py``), each worker and each client in its own process, a
scripted model whose every call takes ``L`` seconds (``--latencies``, default 0, 1, 3, 10 s),
durable-agent's streamed at about 20 deltas a second (0 s: no delay). durable-agent's client
reads ``events()`` with live tokens on (the store's live-delta channel, the default), and at the
``--wait-latencies`` (default 0 and 1 s) also only ``wait()``; at the ``--dark-latencies`` (default
none) also ``events()`` with live deltas off on both sides (``ours dark``: the model still streams,
nobody publishes or reads its deltas), which tells what streaming the model costs from what
publishing and following its deltas cost. At the ``--streamed-peer-latencies`` (default none)
Pydantic AI also runs with an ``event_stream_handler`` (``pai-streamed``): its model activity
streams the same deltas over ``L`` into a handler that counts them and publishes them nowhere (a
lower bound for the peer with live tokens; its "live deltas" are the model-stream events the
handler saw, ours the ``message_update`` events the client got). Every workload gets a fresh
worker and client process and a 5-turn warm-up without model latency that is not counted.

Actions come from the dev server's own ``action`` metric (``--metrics-port``), scraped before and
after each measured conversation, and are broken down by kind (``_cost_actions.py``); every
workload is cross-checked against a count rebuilt from its workflow histories plus the queries its
processes counted. CPU is process CPU time (all threads): the client's over its measured
conversation, the worker's between the two scrapes, both as each process reports it.

``--before REV`` runs durable-agent's variants twice, once from a ``git worktree`` of ``REV``
(its ``src`` first on the subprocesses' ``PYTHONPATH``) and once from this tree, so figures before
and after a change appear side by side. Prints one table per latency and writes
``bench/results/cost.json``. The default run takes about 14 minutes (most of it the 10 s model).

Run: ``make bench-cost`` or ``.venv-peers/bin/python bench/cost_bench.py [--latencies 0,1]
[--turns 20] [--reps 1] [--before REV] [--dark-latencies 3] [--streamed-peer-latencies 1,3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for extra in (HERE, HERE / "peers"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from run import machine, versions  # noqa: E402
from temporalio.client import Client  # noqa: E402

from _cost_actions import (  # noqa: E402
    KINDS,
    by_kind,
    cross_check,
    histories_actions,
    list_runs,
    scrape,
    settled,
)
from _servers import DevServer, free_port, start_dev_server  # noqa: E402

SIDE = HERE / "peers" / "_cost_side.py"
TRANSFER_RPS_KEY = "history.transferProcessorMaxPollRPS"  # as bench/temporal_bench.py


@dataclass(frozen=True)
class Variant:
    side: str
    """``ours`` or ``pai`` (``mode`` ``streamed``: with an event stream handler)."""
    mode: str = "events"
    before: bool = False
    live_every: float | None = None
    """Our worker's ``live_every`` (``None``: its default)."""

    @property
    def name(self) -> str:
        if self.side == "pai":
            return "pai-streamed" if self.mode == "streamed" else "pydantic-ai"
        every = "" if self.live_every is None else f" (live every {self.live_every:g} s)"
        return f"ours {self.mode}" + (" (before)" if self.before else "") + every


@dataclass
class Env:
    server: DevServer
    metrics_url: str
    client: Client
    root: Path
    trees: dict[bool, Path]
    """before? -> the tree whose ``src`` durable-agent runs from."""


class Proc:
    """A side process: lines in on stdin, tagged JSON lines out on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc, self.log = proc, log

    @classmethod
    async def start(cls, env: Env, role: str, variant: Variant, log: Path, *flags: str) -> Proc:
        tree = env.trees[variant.before]
        penv = dict(os.environ)
        penv["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tree / "src"), os.environ.get("PYTHONPATH", "")) if p
        )
        with log.open("ab") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(SIDE),
                role,
                "--side",
                variant.side,
                *flags,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=penv,
            )
        return cls(proc, log)

    async def expect(self, tag: str, within: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(within):
            while raw := await self.proc.stdout.readline():
                head, _, payload = raw.decode().strip().partition(" ")
                if head == tag:
                    result: dict[str, Any] = json.loads(payload)
                    return result
        raise RuntimeError(f"side process exited before '{tag}' (see {self.log})")

    async def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{text}\n".encode())
        await self.proc.stdin.drain()

    async def stop(self) -> None:
        """End of input, then SIGKILL by PID if it has not exited within 15 s."""
        if self.proc.returncode is None and self.proc.stdin is not None:
            with contextlib.suppress(ConnectionError):
                self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


def check_tree(env: Env, variant: Variant, reported: dict[str, Any]) -> None:
    src = env.trees[variant.before] / "src"
    if variant.side == "ours" and not Path(reported["durable_agent"]).is_relative_to(src):
        raise RuntimeError(f"{variant.name} imported {reported['durable_agent']}, not from {src}")


async def workload(env: Env, variant: Variant, latency: float, turns: int) -> dict[str, Any]:
    """One measured conversation on a fresh worker and client process."""
    tag = f"{variant.side}-{variant.mode}-{'b' if variant.before else 'n'}-{uuid.uuid4().hex[:6]}"
    queue, store = f"cost-{tag}", env.root / f"store-{tag}"
    common = ["--address", env.server.address, "--queue", queue, "--store", str(store)]
    worker = await Proc.start(
        env, "worker", variant, env.root / f"{tag}.log", *common,
        "--latency", str(latency), "--mode", variant.mode,
        *([] if variant.live_every is None else ["--live-every", str(variant.live_every)]),
    )  # fmt: skip
    client: Proc | None = None
    try:
        check_tree(env, variant, await worker.expect("ready", 120))
        client = await Proc.start(
            env, "client", variant, env.root / f"{tag}.log", *common,
            "--turns", str(turns), "--mode", variant.mode,
        )  # fmt: skip
        check_tree(env, variant, await client.expect("warm", 300))
        before = await settled(env.metrics_url)
        await worker.send("mark")
        w0 = await worker.expect("mark", 30)
        since = datetime.now(UTC)
        await client.send("go")
        done = await client.expect("done", turns * (2 * latency + 10) + 120)
        await worker.send("mark")  # its work is over once the client has the last result
        w1 = await worker.expect("mark", 30)
        after = await settled(env.metrics_url)
    finally:
        for p in (client, worker):
            if p is not None:
                await p.stop()
    actions = Counter(after)
    actions.subtract(before)
    actions = +actions
    kinds = by_kind(actions)
    runs = await list_runs(env.client, queue, since, expect=turns)
    history = await histories_actions(env.client, runs)
    rpcs: Counter[str] = Counter(done["rpcs"])
    rpcs.update(Counter(w1["rpcs"]) - Counter(w0["rpcs"]))
    queries = sum(n for k, n in rpcs.items() if k.startswith("query:"))
    return {
        "latency": latency,
        "turns": turns,
        "actions_by_label": dict(actions),
        "actions_by_kind": kinds,
        "actions": sum(kinds.values()),
        "history_by_kind": dict(history),
        "workflows": len(runs),
        "rpcs_counted": dict(rpcs),
        "mismatch": cross_check(kinds, history, queries),
        "client_cpu_s": done["cpu"],
        "worker_cpu_s": w1["cpu"] - w0["cpu"],
        "wall_s": done["wall"],
        "live_deltas": done["updates"] + w1.get("handled", 0) - w0.get("handled", 0),
    }


def per_turn(rep: dict[str, Any]) -> dict[str, float]:
    n = rep["turns"]
    out = {"actions": rep["actions"] / n}
    out.update({k: v / n for k, v in rep["actions_by_kind"].items()})
    out["client CPU ms"] = 1000 * rep["client_cpu_s"] / n
    out["worker CPU ms"] = 1000 * rep["worker_cpu_s"] / n
    out["live deltas"] = rep["live_deltas"] / n
    out["wall s"] = rep["wall_s"] / n
    return out


def medians(reps: list[dict[str, Any]]) -> dict[str, float]:
    rows = [per_turn(r) for r in reps]
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


RATIOS = ("actions", "client CPU ms", "worker CPU ms")


def row(label: str, cells: list[str]) -> None:
    print(f"  {label:<36}" + "".join(f"{c:>22}" for c in cells))


def print_latency(latency: float, results: dict[str, list[dict[str, Any]]], turns: int) -> None:
    """One table: a column per variant, a row per figure (per turn), then ours/peer ratios."""
    names = list(results)
    med = {n: medians(results[n]) for n in names}
    print(f"\nmodel latency {latency:g} s: per turn ({turns} turns, median over repetitions)")
    row("", names)
    for key in ("actions", *(f"  {k}" for k in KINDS), *RATIOS[1:], "live deltas", "wall s"):
        k = key.strip()
        digits = 1 if k in RATIOS[1:] else 2
        row(key + ("" if k in RATIOS else " / turn"), [f"{med[n][k]:.{digits}f}" for n in names])
    for peer_name, label in (("pydantic-ai", "peer"), ("pai-streamed", "streamed peer")):
        peer = med.get(peer_name)
        for k in RATIOS if peer is not None else ():
            assert peer is not None
            row(
                f"ratio {k.split()[0]} ours/{label}",
                [
                    "-" if n.startswith("p") or not peer[k] else f"{med[n][k] / peer[k]:.2f}x"
                    for n in names
                ],
            )
    row(
        "metric vs histories+clients",
        ["DIFFER" if any(r["mismatch"] for r in results[n]) else "agree" for n in names],
    )
    for n in names:
        for r in results[n]:
            if r["mismatch"]:
                print(f"    {n}: kind -> (metric, histories/clients): {r['mismatch']}")


def variants(latency: float, args: argparse.Namespace) -> list[Variant]:
    out: list[Variant] = []
    modes = ["events", *(["wait"] if latency in args.wait_latencies else [])]
    for mode in modes + (["dark"] if latency in args.dark_latencies else []):
        if args.before is not None and mode != "dark":
            out.append(Variant("ours", mode, before=True))
        out.append(Variant("ours", mode))
    if args.live_every is not None:
        out.append(Variant("ours", "events", live_every=args.live_every))
    out.append(Variant("pai", "wait"))
    if latency in args.streamed_peer_latencies:
        out.append(Variant("pai", "streamed"))
    return out


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


async def bench(args: argparse.Namespace, root: Path, trees: dict[bool, Path]) -> dict[str, Any]:
    mport = free_port()
    server = await start_dev_server(
        root / "server",
        dynamic_config={TRANSFER_RPS_KEY: 1000},
        extra_args=["--metrics-port", str(mport)],
    )
    metrics_url = f"http://127.0.0.1:{mport}/metrics"
    print(f"Temporal dev server {server.address} (pid {server.pid}), metrics {metrics_url}")
    try:
        scrape(metrics_url)
        env = Env(server, metrics_url, await Client.connect(server.address), root, trees)
        out: dict[str, Any] = {}
        for latency in args.latencies:
            results: dict[str, list[dict[str, Any]]] = {}
            vs = variants(latency, args)
            for rep in range(args.reps):
                for v in vs[rep % len(vs) :] + vs[: rep % len(vs)]:  # rotate who goes first
                    t0 = time.perf_counter()
                    r = await workload(env, v, latency, args.turns)
                    results.setdefault(v.name, []).append(r)
                    print(
                        f"  {latency:g} s {v.name}: {r['actions'] / args.turns:.2f} actions/turn "
                        f"({time.perf_counter() - t0:.0f} s)",
                        flush=True,
                    )
            results = {v.name: results[v.name] for v in vs}
            print_latency(latency, results, args.turns)
            out[f"{latency:g}"] = {
                "latency_s": latency,
                "per_turn_median": {n: medians(rs) for n, rs in results.items()},
                "runs": results,
            }
        return out
    finally:
        server.stop()


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latencies", type=floats, default=[0.0, 1.0, 3.0, 10.0])
    parser.add_argument("--wait-latencies", type=lambda t: set(floats(t)), default={0.0, 1.0})
    parser.add_argument("--dark-latencies", type=lambda t: set(floats(t)), default=set())
    parser.add_argument("--streamed-peer-latencies", type=lambda t: set(floats(t)), default=set())
    parser.add_argument(
        "--live-every", type=float, help="also run ours with create_worker(live_every=SECONDS)"
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--before", metavar="REV", help="also run durable-agent from REV")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "cost.json")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="cost-bench-"))
    trees = {False: REPO}
    revs = {"now": git("rev-parse", "HEAD") + (" (dirty)" if git("status", "--porcelain") else "")}
    if args.before is not None:
        revs["before"] = git("rev-parse", args.before)
        trees[True] = root / "before"
        git("worktree", "add", "--detach", str(trees[True]), revs["before"])
    t0 = time.perf_counter()
    try:
        results = asyncio.run(bench(args, root, trees))
    except BaseException:
        print(f"failed; the side processes' logs are kept in {root}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(root, ignore_errors=True)
    finally:
        if args.before is not None:
            git("worktree", "remove", "--force", str(trees[True]))
    seconds = time.perf_counter() - t0
    report = {
        "versions": versions(),
        "machine": machine(),
        "revisions": revs,
        "args": {
            "latencies": args.latencies,
            "wait_latencies": sorted(args.wait_latencies),
            "dark_latencies": sorted(args.dark_latencies),
            "streamed_peer_latencies": sorted(args.streamed_peer_latencies),
            "live_every": args.live_every,
            "turns": args.turns,
            "reps": args.reps,
            "before": args.before,
        },
        "seconds": seconds,
        "latencies": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\ntotal {seconds:.0f} s; figures written to {args.json}")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    os._exit(rc)  # skip interpreter teardown (the Temporal SDK can abort at exit)
