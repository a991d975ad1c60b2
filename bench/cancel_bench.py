"""Cancel -> stop of a streaming model call on Temporal: seconds from ``stream.cancel()`` to the
model's stream being stopped on the worker, over ``--runs`` runs (p50, p95, max).

A worker with the library's default timeouts (``Timeouts()``) and a model streaming a token
every 50 ms, on a FileStore; the client cancels each run after a random 0.5-1.5 s of streaming.
The worker runs in this process (one clock for both ends); the model records when its stream
stopped. ``--before REV`` also runs the same measurement with durable-agent as of ``REV`` (a
``git worktree`` of it first on the subprocess's ``PYTHONPATH``), so the figures print side by
side: before, cancellation reached a call in a heartbeat's response; now, through the run's
cancel note on the live channel (docs/design.md#cancellation).

Run: ``.venv/bin/python bench/cancel_bench.py [--runs 20] [--before REV]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class Endless:
    """Streams a token every 50 ms until stopped; records when it stopped."""

    def __init__(self) -> None:
        self.streaming = asyncio.Event()
        self.stopped: float | None = None
        self.stop_seen = asyncio.Event()

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from durable_agent import Reply, ScriptedModel

        inner = ScriptedModel([Reply(text="token " * 100_000, chunk_size=6, chunk_delay=0.05)])
        self.streaming.clear()
        self.stop_seen.clear()
        self.stopped = None
        try:
            n = 0
            async for event in inner.stream(request):
                n += 1
                if n == 3:
                    self.streaming.set()
                yield event
        finally:
            self.stopped = time.monotonic()
            self.stop_seen.set()


async def measure(runs: int, address: str, root: Path) -> list[float]:
    from durable_agent import new
    from durable_agent.stores import FileStore
    from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker

    client = await connect(address)
    store, queue, lm = FileStore(root), f"cancel-{uuid.uuid4().hex[:8]}", Endless()
    worker = await create_worker(
        client, task_queue=queue, store=store, agents={"endless": AgentSpec(model=lm)}
    )
    took: list[float] = []
    async with worker:
        agent = await new(
            "endless", store=store, executor=TemporalExecutor(client, task_queue=queue)
        )
        for _ in range(runs):
            stream = await agent.run("go")
            await asyncio.wait_for(lm.streaming.wait(), 30)
            await asyncio.sleep(random.uniform(0.5, 1.5))
            asked = time.monotonic()
            await stream.cancel()
            await asyncio.wait_for(lm.stop_seen.wait(), 60)
            assert lm.stopped is not None
            took.append(lm.stopped - asked)
            with contextlib.suppress(Exception):  # RunCancelledError, as it should
                await stream.wait()
    return took


def figures(took: list[float]) -> dict[str, float]:
    ordered = sorted(took)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1], "n": len(ordered)}


def _run_side(runs: int, address: str, src: Path, root: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, __file__, "--side", "--runs", str(runs), "--address", address]
    done = subprocess.run(
        [*argv, "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _git(*args: str) -> None:
    subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True)


def _git(*args: str) -> None:
    subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True)


async def serve_and_run(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE))
    from _servers import start_dev_server

    root = Path(tempfile.mkdtemp(prefix="cancel-bench-"))
    server = await start_dev_server(root / "server")
    trees: dict[str, Path] = {"now": REPO}
    try:
        if args.before:
            trees = {"before": root / "before", **trees}
            await asyncio.to_thread(
                _git, "worktree", "add", "--detach", str(root / "before"), args.before
            )
        results = {
            name: await asyncio.to_thread(
                _run_side, args.runs, server.address, tree / "src", root / f"{name}-sessions"
            )
            for name, tree in trees.items()
        }
    finally:
        server.stop()
        if args.before:
            await asyncio.to_thread(_git, "worktree", "remove", "--force", str(root / "before"))
        shutil.rmtree(root, ignore_errors=True)
    print(f"cancel -> model stream stopped, seconds over {args.runs} runs")
    for name, fig in results.items():
        print(f"  {name:<8} p50 {fig['p50']:.3f}  p95 {fig['p95']:.3f}  max {fig['max']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--before", metavar="REV")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        took = asyncio.run(measure(args.runs, args.address, args.root))
        print(json.dumps(figures(took)))
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown (the Temporal SDK can abort at exit)
    asyncio.run(serve_and_run(args))


if __name__ == "__main__":
    main()
