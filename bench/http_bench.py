"""The HTTP API under load: frame latency, first token, reconnect, 200 clients, resume at 9,990.

A real Temporal dev server, a worker in this process on a FileStore, and ``durable-agent serve``
in its own process (so its CPU is its own), all on this machine's clock. The scripted
conversation: a question, a tool call, its result, then a reply of ~60 tokens streamed at one
every 20 ms. Figures:

- **entry -> frame**: from the moment the worker's append of an entry returned (the worker runs
  in this process, its store notes the time) to the entry's ``event: entry`` frame at the
  client;
- **first token**: from ``POST .../runs`` to the first ``event: delta`` frame;
- **reconnect after the run ended**: a client that comes back with ``Last-Event-ID: 0`` gets the
  full replay (the time to receive every entry);
- **200 clients**: 200 streams on one session through one server process: that process's CPU
  seconds per run and the p95 entry -> frame latency over every client;
- **resume at 9,990**: ``load_entries_after(9990)`` of a 10,000-entry FileStore session by a
  fresh store object against ``load_entries`` (the whole session), each in a fresh process
  (``_resume.py`` says how each read is measured); ``--before REV`` measures REV's ``src`` the
  same way, in turns with this tree's, and ``--resume-only`` measures only that.

Run: ``.venv/bin/python bench/http_bench.py [--runs 10] [--clients 200] [--before REV]
[--resume-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO / "src")]

from _servers import free_port, start_dev_server  # noqa: E402
from _stats import pct  # noqa: E402
from durable_agent import Reply, ScriptedModel, tool  # noqa: E402
from durable_agent.stores import FileStore  # noqa: E402
from durable_agent.workflows import AgentSpec, connect, create_worker  # noqa: E402

ANSWER = " ".join(f"word{i}" for i in range(60))


@tool
async def lookup(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


def script(request: Any) -> Reply:
    results = [m for m in request.messages if m.role == "tool_result"]
    asked = [m for m in request.messages if m.role == "user"]
    if len(results) < len(asked):
        return Reply.call("lookup", {"city": "Paris"}, id=f"call-{len(asked)}")
    return Reply(text=ANSWER, chunk_size=6, chunk_delay=0.02)


class Client:
    """One SSE reader: arrival time of each frame."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, dict[str, Any]]] = []
        self.deltas: list[float] = []
        self.ended = asyncio.Event()
        self.count = 0

    async def read(self, http: httpx.AsyncClient, sid: str, after: int, until: int) -> None:
        headers = {"Last-Event-ID": str(after)}
        async with http.stream("GET", f"/v1/sessions/{sid}/stream", headers=headers) as response:
            event = ""
            async for line in response.aiter_lines():
                now = time.time()
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if event == "entry":
                        self.entries.append((now, data))
                        if data["seq"] >= until:
                            self.ended.set()
                            return
                    elif event == "delta":
                        self.deltas.append(now)


STORED: dict[str, float] = {}
"""Entry ID -> when the worker's append of it returned (this process's clock)."""


class TimedStore(FileStore):
    """The worker's FileStore, noting when each entry's append returned."""

    async def append_entries(self, session_id: str, entries: Any) -> None:
        await super().append_entries(session_id, entries)
        now = time.time()
        for entry in entries:
            STORED.setdefault(entry.id, now)


def latencies(client: Client) -> list[float]:
    """Per entry: from the moment its append returned on the worker to its frame."""
    return [arrived - STORED[data["entry"]["id"]] for arrived, data in client.entries]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def serving(root: Path, address: str, queue: str) -> AsyncIterator[tuple[str, int]]:
    port = free_port()
    argv = [sys.executable, "-m", "durable_agent.cli", "serve", "--port", str(port)]
    argv += ["--store", f"file:{root}", "--address", address, "--task-queue", queue]
    argv += ["--agent", "bench"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/v1/sessions")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


async def one_run(url: str, sid: str, clients: int) -> dict[str, Any]:
    """``clients`` streams on a fresh session, one run; their latencies and the first token."""
    limits = httpx.Limits(max_connections=clients + 10)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as http:
        await http.post("/v1/sessions", json={"session_id": sid})
        readers = [Client() for _ in range(clients)]
        tasks = [asyncio.create_task(r.read(http, sid, 0, 4)) for r in readers]
        await asyncio.sleep(0.5)  # let every stream connect (a bench, not a test)
        posted = time.time()
        await http.post(f"/v1/sessions/{sid}/runs", json={"text": "Weather in Paris?"})
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    first = [r.deltas[0] - posted for r in readers if r.deltas]
    return {"latency": [x for r in readers for x in latencies(r)], "first": first}


async def replay(url: str, sid: str, until: int) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=None) as http:
        reader = Client()
        t0 = time.perf_counter()
        await reader.read(http, sid, 0, until)
        return time.perf_counter() - t0


RESUME = HERE / "_resume.py"


def resume_at_9990(root: Path, before: str | None, rounds: int = 3) -> dict[str, dict[str, float]]:
    """``bench/_resume.py`` on one 10,000-entry session: each round a fresh process from this
    tree and, with ``before``, one from that revision's ``src`` (a ``git archive`` of it), in
    turns, so both see the same machine; the least of each figure over the rounds."""
    session = root / "big"
    run = [sys.executable, str(RESUME)]
    subprocess.run([*run, "build", str(session)], check=True)
    trees = {"now": REPO / "src"}
    if before is not None:
        tree = root / "before"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", before, "src"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        trees = {"before": tree / "src", **trees}
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for name, src in trees.items():
            argv = [*run, "measure", str(session), "--src", str(src)]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            got = json.loads(done.stdout)
            assert Path(got.pop("src")).resolve() == src.resolve(), "imported another tree"
            mine = best.setdefault(name, got)
            for key, value in got.items():
                mine[key] = min(mine[key], value)
    return best


def print_resume(figures: dict[str, dict[str, float]]) -> None:
    for name, big in figures.items():
        print(
            f"resume at seq 9,990 of 10,000 (FileStore, {name}): {big['cold'] * 1000:.1f} ms "
            f"cold, {big['warm'] * 1000:.2f} ms with the mark of a follower, vs a full load "
            f"{big['full'] * 1000:.1f} ms ({big['cold'] / big['full']:.3f} and "
            f"{big['warm'] / big['full']:.4f} of it)"
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="skip LangGraph's Agent Server"
    )
    parser.add_argument("--before", metavar="REV", help="also measure the resume at REV's src")
    parser.add_argument("--resume-only", action="store_true", help="only the resume at 9,990")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.resume_only:
            print_resume(resume_at_9990(root, args.before))
            return
        server = await start_dev_server(root / "temporal")
        try:
            await measure(root, server.address, args)
        finally:
            server.stop()


async def measure(root: Path, address: str, args: argparse.Namespace) -> None:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    store = TimedStore(root / "sessions")
    client = await connect(address)
    spec = AgentSpec(model=ScriptedModel(script), tools=[lookup])
    worker = await create_worker(client, task_queue=queue, store=store, agents={"bench": spec})
    async with worker, serving(root / "sessions", address, queue) as (url, pid):
        single = [await one_run(url, f"one-{i}", 1) for i in range(args.runs)]
        lat = [x for r in single for x in r["latency"]]
        first = [x for r in single for x in r["first"]]
        replays = [await replay(url, f"one-{i}", 4) for i in range(args.runs)]
        cpu0 = cpu_seconds(pid)
        crowd = await one_run(url, "crowd", args.clients)
        cpu = cpu_seconds(pid) - cpu0
    big = resume_at_9990(root, args.before)
    peer = langgraph(args) if args.peer else None

    def ms(values: list[float], q: float) -> str:
        return f"{pct(values, q) * 1000:.0f} ms"

    print(f"entry -> frame (1 client, {len(lat)} entries): p50 {ms(lat, 0.5)}, p95 {ms(lat, 0.95)}")
    for seq in range(1, 5):
        of_seq = [r["latency"][seq - 1] for r in single if len(r["latency"]) >= seq]
        print(f"  seq {seq}: p50 {ms(of_seq, 0.5)}, max {ms(of_seq, 1.0)}")
    print(f"first token over HTTP ({len(first)} runs): p50 {ms(first, 0.5)}, p95 {ms(first, 0.95)}")
    print(f"reconnect after the run ended: full replay of 4 entries, p50 {ms(replays, 0.5)}")
    crowd_lat = crowd["latency"]
    print(
        f"{args.clients} clients on one session, one server process: CPU {cpu:.2f} s for the run, "
        f"entry -> frame p50 {ms(crowd_lat, 0.5)}, p95 {ms(crowd_lat, 0.95)}"
    )
    print_resume(big)

    if peer is not None:
        print_peer(peer, args.clients)


PEERS_PYTHON = REPO / ".venv-peers" / "bin" / "python"


def langgraph(args: argparse.Namespace) -> dict[str, Any] | None:
    """LangGraph's Agent Server on the same conversation (``bench/peers/langgraph_http.py``, in
    the peers' venv); ``None`` when that venv is missing (``make bench-peers`` builds it)."""
    if not PEERS_PYTHON.exists():
        print("LangGraph: no .venv-peers (make bench-peers), not measured")
        return None
    script = HERE / "peers" / "langgraph_http.py"
    argv = [str(PEERS_PYTHON), str(script), "--runs", str(args.runs)]
    argv += ["--clients", str(args.clients)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def print_peer(peer: dict[str, Any], clients: int) -> None:
    def ms(values: list[float], q: float) -> str:
        return f"{pct(values, q) * 1000:.0f} ms"

    single = peer["single"]
    values = [x for r in single for x in r["values"]]
    first = [r["first"] for r in single if r["first"] is not None]
    print("LangGraph Agent Server (langgraph dev, in-memory runtime), same conversation:")
    print(f"  checkpoint -> values frame: p50 {ms(values, 0.5)}, p95 {ms(values, 0.95)}")
    print(f"  first token over HTTP: p50 {ms(first, 0.5)}, p95 {ms(first, 0.95)}")
    frames = [r["rejoin_frames"] for r in single]
    print(f"  reconnect after the run ended (join its stream): {max(frames)} frames replayed")
    crowd = peer["crowd"]
    print(
        f"  {clients} clients joining one run: CPU {crowd['cpu']:.2f} s, {crowd['frames']} "
        f"frames, frame latency p50 {ms(crowd['values'], 0.5)}, p95 {ms(crowd['values'], 0.95)}"
    )


if __name__ == "__main__":
    asyncio.run(main())
