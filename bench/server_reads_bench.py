"""Benchmark: what the HTTP server's reads cost on a store shared by tenants and long sessions.

Each case is timed through the app on a loopback uvicorn server (a stream needs one), on the
``src/`` of git revision ``--before`` and on this tree, each in its own interpreter, side by side,
with the interpreter's peak memory (``ru_maxrss``) after the case:

- ``list``: a tenant's ``GET /v1/sessions?limit=20`` beside another tenant's ``--others``
  sessions (the store lists the caller's prefix; before, the server paged through every
  session of the store and kept the caller's);
- ``page``: ``GET .../entries?after=0&limit=20`` on a session of ``--entries`` entries of
  ``--entry-kib`` KiB each (the store reads about the page; before, the whole session);
- ``object``: ``GET /v1/sessions/{id}`` on that session (its last seq and leaf);
- ``replay``: a stream resumed at seq 0 on that session, read to its ``: live`` comment (the
  replay reads the store a page at a time; before, the whole tail at once);
- ``approvals``: ``GET .../approvals`` on that session (the end of its active path; before,
  the whole session).

Run: ``.venv/bin/python bench/server_reads_bench.py --before REV`` (FileStore; ``--others
5000 --entries 2000 --entry-kib 20 --repeat 7``).
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

from durable_agent.ai import user_message
from durable_agent.session import MessageEntry
from durable_agent.stores import FileStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sessions_list_bench import ROOT, export_src

CASES = ("list", "page", "object", "replay", "approvals")

CHILD = """
import asyncio, json, resource, socket, statistics, sys, time
import httpx, uvicorn
from durable_agent.server import create_app
from durable_agent.stores import FileStore

ROUTES = {
    "list": "/v1/sessions?limit=20",
    "page": "/v1/sessions/acme:long/entries?after=0&limit=20",
    "object": "/v1/sessions/acme:long",
    "approvals": "/v1/sessions/acme:long/approvals",
}
KEY = {"authorization": "Bearer k"}

async def once(client, case):
    if case != "replay":
        (await client.get(ROUTES[case], headers=KEY)).raise_for_status()
        return
    headers = {**KEY, "last-event-id": "0"}
    async with client.stream("GET", "/v1/sessions/acme:long/stream", headers=headers) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line == ": live":
                return

async def main(root, case, repeat):
    app = create_app(store=FileStore(root), keys={"k": {"principal": "ann", "prefix": "acme:"}})
    with socket.socket() as sock:  # a free port (streams need a real server: no ASGI transport)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            await once(client, case)
            times.append(time.perf_counter() - start)
    server.should_exit = True
    await serving
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"p50_ms": statistics.median(times) * 1e3, "peak_mib": peak}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def build(root: Path, others: int, entries: int, entry_kib: int) -> None:
    store = FileStore(root, fsync=False)
    for i in range(20):  # older than the other tenant's: newest first, they come after its
        await store.create_session(f"acme:{i:06d}")
    await store.create_session("acme:long")
    for i in range(others):
        await store.create_session(f"bolt:{i:06d}")
    filler = "x" * (entry_kib * 1024)
    parent: str | None = None
    for start in range(0, entries, 100):
        batch = []
        for j in range(start, min(start + 100, entries)):
            entry = MessageEntry(id=f"{j:016x}", parent_id=parent, message=user_message(filler))
            batch.append(entry)
            parent = entry.id
        await store.append_entries("acme:long", batch)


def measure(src: Path, root: Path, case: str, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), case, str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=5000)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--entry-kib", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--before", default="main")
    parser.add_argument("--cases", default=",".join(CASES))
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = work / "sessions"
        asyncio.run(build(root, opts.others, opts.entries, opts.entry_kib))
        trees = {"before": export_src(opts.before, work / "before"), "after": ROOT / "src"}
        print(
            f"FileStore: a tenant of 21 sessions beside one of {opts.others}; its long session "
            f"{opts.entries} x {opts.entry_kib} KiB; loopback server, median of {opts.repeat}; "
            f"before = {opts.before}"
        )
        print(
            f"  {'case':<8} {'before ms':>10} {'after ms':>10} {'before MiB':>11} {'after MiB':>10}"
        )
        for case in opts.cases.split(","):
            got = {label: measure(src, root, case, opts.repeat) for label, src in trees.items()}
            b, a = got["before"], got["after"]
            print(
                f"  {case:<8} {b['p50_ms']:10.1f} {a['p50_ms']:10.1f} "
                f"{b['peak_mib']:11.0f} {a['peak_mib']:10.0f}"
            )


if __name__ == "__main__":
    main()
