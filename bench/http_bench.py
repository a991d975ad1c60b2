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
  same way, in turns with this tree's, and ``--resume-only`` measures only that;
- **cost per run**: the server process's store reads (``load_entries``/``load_entries_after`` calls
  of any store object in it), session-record reads (``load_session``), live-delta reads
  (``FileDeltas.read_now``) and CPU seconds per run, with one browser streaming the session and
  with none (a run started through the API that nobody watches), counted by ``_serve_counted.py``
  inside the server process over a batch of runs on fresh sessions, until the hubs of the batch's
  sessions stopped (they linger after their browser left). With ``--before REV`` a server running
  REV's ``src`` serves the same runs in turns with this tree's (one worker, one Temporal), and the
  figures print side by side; ``--cost-only`` measures only that.

Run: ``.venv/bin/python bench/http_bench.py [--runs 10] [--clients 200] [--before REV]
[--resume-only | --cost-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO / "src")]

from temporalio.client import Client as TemporalClient  # noqa: E402

from _http_serve import Served, serving  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from _stats import pct  # noqa: E402
from durable_agent import Reply, ScriptedModel, tool  # noqa: E402
from durable_agent.server.hub import LINGER  # noqa: E402
from durable_agent.stores import FileStore  # noqa: E402
from durable_agent.workflows import (  # noqa: E402
    AgentSpec,
    connect,
    create_worker,
    run_workflow_id,
)

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

    async def read(
        self, http: httpx.AsyncClient, sid: str, after: int, until: int, end: bool = False
    ) -> None:
        """Until the entry of seq ``until`` (with ``end``: until a run's end) came."""
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
                        if data["seq"] >= until and not end:
                            self.ended.set()
                            return
                    elif event == "delta":
                        self.deltas.append(now)
                    elif event == "run" and end and data["status"] in ENDS:
                        return


ENDS = ("completed", "failed", "cancelled")


STORED: dict[str, float] = {}
"""Entry ID -> when the worker's append of it returned (this process's clock)."""


class TimedStore(FileStore):
    """The worker's FileStore, noting when each entry's append returned."""

    async def append_entries(self, session_id: str, entries: Any) -> None:
        await super().append_entries(session_id, entries)
        self._noted(entries)

    async def append_if_last(self, session_id: str, entries: Any, last_id: str | None) -> bool:
        """A run's input since the server's starts are guarded (an older build never calls it)."""
        stored: bool = await super().append_if_last(session_id, entries, last_id)
        self._noted(entries)
        return stored

    @staticmethod
    def _noted(entries: Any) -> None:
        now = time.time()
        for entry in entries:
            STORED.setdefault(entry.id, now)


def latencies(client: Client) -> list[float]:
    """Per entry: from the moment its append returned on the worker to its frame."""
    return [arrived - STORED[data["entry"]["id"]] for arrived, data in client.entries]


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


async def watched_run(served: Served, sid: str) -> tuple[Client, float]:
    """One run on a fresh session with one browser streaming it until the run's end frame: the
    browser's frames and when the run was posted."""
    async with httpx.AsyncClient(base_url=served.url, timeout=None) as http:
        await http.post("/v1/sessions", json={"session_id": sid})
        reader = Client()
        reading = asyncio.create_task(reader.read(http, sid, 0, 4, end=True))
        await asyncio.sleep(0.3)  # the stream connects (a bench, not a test)
        posted = time.time()
        await http.post(f"/v1/sessions/{sid}/runs", json={"text": "Weather in Paris?"})
        await asyncio.wait_for(reading, 120)
    return reader, posted


async def unwatched_run(served: Served, sid: str, temporal: TemporalClient) -> None:
    """One run started through the API that no browser watches, until its workflow ended."""
    async with httpx.AsyncClient(base_url=served.url, timeout=None) as http:
        started = await http.post(f"/v1/sessions/{sid}/runs", json={"text": "Weather in Paris?"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
    await temporal.get_workflow_handle(run_workflow_id(sid, run_id)).result()


async def cost(
    servers: dict[str, Served], runs: int, temporal: TemporalClient
) -> dict[str, dict[str, Any]]:
    """Per server: store reads, live-delta reads and CPU seconds per run, with one browser
    (``watched``) and with none (``unwatched``), the servers serving runs in turns; for the
    watched runs also each entry's latency and the first token."""
    figures: dict[str, dict[str, Any]] = {n: {"latency": [], "first": []} for n in servers}
    for watched in (True, False):
        start = {n: (await s.reads(), s.cpu()) for n, s in servers.items()}
        for i in range(runs):
            for n, (name, served) in enumerate(servers.items()):
                sid = f"cost-{n}-{int(watched)}-{i}"
                if not watched:
                    await unwatched_run(served, sid, temporal)
                    continue
                reader, posted = await watched_run(served, sid)
                figures[name]["latency"] += latencies(reader)
                figures[name]["first"] += [reader.deltas[0] - posted] if reader.deltas else []
        await asyncio.sleep(LINGER + 2)  # the batch's hubs stop (each lingers after its browser)
        for name, served in servers.items():
            reads, (reads0, cpu0) = await served.reads(), start[name]
            figures[name]["watched" if watched else "unwatched"] = {
                "store": (reads["store"] - reads0["store"]) / runs,
                "channel": (reads["channel"] - reads0["channel"]) / runs,
                "record": (reads["record"] - reads0["record"]) / runs,
                "cpu": (served.cpu() - cpu0) / runs,
            }
    return figures


def print_cost(figures: dict[str, dict[str, Any]], runs: int) -> None:
    names = list(figures)
    print(f"cost per run, one server process, FileStore ({runs} runs each, in turns):")
    print(f"  {'':44}" + "".join(f"{n:>18}" for n in names))
    for mode, label in (("watched", "1 browser"), ("unwatched", "no browser")):
        rows = [
            (f"store reads per run, {label}", lambda f: f"{f['store']:.1f}"),
            (f"live-delta reads per run, {label}", lambda f: f"{f['channel']:.1f}"),
            (f"session-record reads per run, {label}", lambda f: f"{f['record']:.1f}"),
            (f"server CPU per run, {label}", lambda f: f"{f['cpu'] * 1000:.0f} ms"),
        ]
        for label_, show in rows:
            print(f"  {label_:44}" + "".join(f"{show(figures[n][mode]):>18}" for n in names))
    for key, label in (("latency", "entry -> frame p50 / p95"), ("first", "first token p50 / p95")):
        cells = [
            f"{pct(figures[n][key], 0.5) * 1000:.0f} / {pct(figures[n][key], 0.95) * 1000:.0f} ms"
            for n in names
        ]
        print(f"  {label + ', 1 browser':44}" + "".join(f"{c:>18}" for c in cells))


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
        trees = {"before": source_tree(root, before), **trees}
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


def source_tree(root: Path, rev: str) -> Path:
    """REV's ``src`` (a ``git archive`` of it under ``root``, made once)."""
    tree = root / "before"
    if not tree.exists():
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree / "src"


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
    parser.add_argument(
        "--before", metavar="REV", help="also measure the resume and the cost per run at REV"
    )
    parser.add_argument("--resume-only", action="store_true", help="only the resume at 9,990")
    parser.add_argument("--cost-only", action="store_true", help="only the cost per run")
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
    trees = {"now": REPO / "src"}
    if args.before:
        trees = {f"before {args.before}": source_tree(root, args.before), **trees}
    async with worker, contextlib.AsyncExitStack() as stack:
        servers = {
            name: await stack.enter_async_context(serving(root / "sessions", address, queue, src))
            for name, src in trees.items()
        }
        figures = await cost(servers, args.runs, client)
        if not args.cost_only:
            await latency(servers["now"], args)
    print_cost(figures, args.runs)
    if args.cost_only:
        return
    print_resume(resume_at_9990(root, args.before))
    peer = langgraph(args) if args.peer else None
    if peer is not None:
        print_peer(peer, args.clients)


async def latency(served: Served, args: argparse.Namespace) -> None:
    """Entry -> frame, first token, reconnect, and the crowd on one session (module doc)."""
    url = served.url
    single = [await one_run(url, f"one-{i}", 1) for i in range(args.runs)]
    lat = [x for r in single for x in r["latency"]]
    first = [x for r in single for x in r["first"]]
    replays = [await replay(url, f"one-{i}", 4) for i in range(args.runs)]
    cpu0 = served.cpu()
    crowd = await one_run(url, "crowd", args.clients)
    cpu = served.cpu() - cpu0

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
