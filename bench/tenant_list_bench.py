"""Benchmark: a tenant's ``GET /v1/sessions`` on a store shared with a larger tenant.

Before, the server paged through every session of the store and kept the caller's (its cost and
latency grew with the other tenants' sessions, and told how many they have); now the store lists
the caller's prefix only (``list_sessions(prefix=)``: a FileStore opens only the files it names,
MongoDB reads an ``_id`` index range). The bench builds one FileStore holding ``--own`` sessions
of tenant ``acme:`` and ``--others`` of tenant ``bolt:``, then times acme's first page
(``limit=20``) through the app in process (``httpx.ASGITransport``, no network), on the ``src/``
of git revision ``--before`` and on this tree, each in its own interpreter, side by side.

Run: ``.venv/bin/python bench/tenant_list_bench.py --before REV`` (``--own 20 --others 5000``,
``--repeat 15``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from durable_agent.stores import FileStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sessions_list_bench import ROOT, export_src

CHILD = """
import asyncio, json, statistics, sys, time
import httpx
from durable_agent.server import create_app
from durable_agent.stores import FileStore

async def main(root, repeat):
    app = create_app(store=FileStore(root), keys={"k": {"principal": "ann", "prefix": "acme:"}})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        times, listed = [], 0
        for _ in range(repeat):
            start = time.perf_counter()
            answer = await client.get(
                "/v1/sessions", params={"limit": 20}, headers={"authorization": "Bearer k"}
            )
            times.append(time.perf_counter() - start)
            answer.raise_for_status()
            listed = len(answer.json()["sessions"])
    print(json.dumps({"p50_ms": statistics.median(times) * 1e3, "listed": listed}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def build(root: Path, own: int, others: int) -> None:
    store = FileStore(root, fsync=False)
    for i in range(others):
        await store.create_session(f"bolt:{i:06d}")
    for i in range(own):
        await store.create_session(f"acme:{i:06d}")


def measure(src: Path, root: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--own", type=int, default=20)
    parser.add_argument("--others", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--before", default="main")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = work / "sessions"
        asyncio.run(build(root, opts.own, opts.others))
        trees = {f"before ({opts.before})": export_src(opts.before, work / "before")}
        trees["after"] = ROOT / "src"
        print(
            f"GET /v1/sessions?limit=20 for a tenant of {opts.own} sessions beside one of "
            f"{opts.others}, FileStore, in process (median of {opts.repeat})"
        )
        for label, src in trees.items():
            figures = measure(src, root, opts.repeat)
            print(f"  {label:<24} {figures['p50_ms']:9.1f} ms  ({figures['listed']:.0f} listed)")


if __name__ == "__main__":
    main()
