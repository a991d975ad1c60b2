"""LangGraph's Agent Server (``langgraph dev``, in-memory runtime) on the bench's scripted
conversation, measured as ``bench/http_bench.py`` measures ours; prints one JSON object.

Run with the peers' venv (``make bench-peers`` installs it): ``.venv-peers/bin/python
bench/peers/langgraph_http.py [--runs 10] [--clients 200]``. The graph is
``bench/peers/langgraph_app/graph.py``: its nodes note when they returned, and a ``values``
frame (sent after the step's checkpoint is stored) is timed from that note.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
QUESTION = {"messages": [{"role": "user", "content": "Weather in Paris?"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` and its children still running (``langgraph dev`` may fork workers)."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextlib.asynccontextmanager
async def langgraph_dev(tmp: Path) -> AsyncIterator[tuple[str, int]]:
    app = tmp / "app"
    shutil.copytree(HERE / "langgraph_app", app)
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"}
    argv = [str(Path(sys.executable).parent / "langgraph"), "dev", "--no-browser", "--no-reload"]
    argv += ["--port", str(port), "--server-log-level", "warning"]
    log = (tmp / "langgraph.log").open("wb")
    proc = subprocess.Popen(argv, cwd=app, env=env, stdout=log, stderr=log)  # noqa: ASYNC220
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(600):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/ok")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(15)


async def read(response: httpx.Response, values: list[float], tokens: list[float]) -> None:
    event = ""
    async for line in response.aiter_lines():
        now = time.time()
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event == "values":
            stamp = json.loads(line[6:]).get("stamp")
            if stamp is not None:
                values.append(now - stamp)
        elif line.startswith("data: ") and event.startswith("messages"):
            data = json.loads(line[6:])
            if data and data[0].get("content"):
                tokens.append(now)


async def one_run(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=None) as http:
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        body = {
            "assistant_id": "agent",
            "input": QUESTION,
            "stream_mode": ["values", "messages-tuple"],
        }
        values: list[float] = []
        tokens: list[float] = []
        posted = time.time()
        async with http.stream("POST", f"/threads/{thread}/runs/stream", json=body) as response:
            await read(response, values, tokens)
        runs = (await http.get(f"/threads/{thread}/runs")).json()
        # reconnect after the run ended: join its stream
        t0 = time.perf_counter()
        again: list[float] = []
        again_tokens: list[float] = []
        join = f"/threads/{thread}/runs/{runs[0]['run_id']}/stream"
        async with http.stream("GET", join, params={"stream_mode": "values"}) as response:
            await read(response, again, again_tokens)
        return {
            "values": values,
            "first": tokens[0] - posted if tokens else None,
            "rejoin_frames": len(again) + len(again_tokens),
            "rejoin_s": time.perf_counter() - t0,
        }


async def crowd(url: str, pid: int, clients: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=clients + 10)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as http:
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        cpu0 = cpu_seconds(pid)
        run = await http.post(
            f"/threads/{thread}/runs",
            json={"assistant_id": "agent", "input": QUESTION, "stream_resumable": True},
        )
        run_id = run.json()["run_id"]
        values: list[float] = []

        async def client() -> None:
            join = f"/threads/{thread}/runs/{run_id}/stream"
            async with http.stream("GET", join, params={"stream_mode": "values"}) as response:
                await read(response, values, [])

        await asyncio.gather(*(client() for _ in range(clients)))
        return {"values": values, "cpu": cpu_seconds(pid) - cpu0, "frames": len(values)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--clients", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        async with langgraph_dev(Path(tmp)) as (url, pid):
            single = [await one_run(url) for _ in range(args.runs)]
            many = await crowd(url, pid, args.clients)
    print(json.dumps({"single": single, "crowd": many}))


if __name__ == "__main__":
    asyncio.run(main())
