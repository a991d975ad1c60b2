"""What a message with the client's ID costs on Temporal, against one without
(docs/design.md#http-api, "Retried requests").

A message naming itself (``message_id``, as the chat page's always do) may be a resend, so the
server first offers it to the session's lately ended runs: one that took it before its answer
was lost answers it, and the going run never takes it twice. That costs a visibility listing
and an update to each ended run (concurrent with the going runs' listing and with each other).
A message without an ID takes the path every message took before: the going runs only.

On one local dev server, a worker and a server in this process (FileStore): a session with five
ended runs and a sixth held at a tool call; then ``--pairs`` pairs of ``POST /messages`` into
that run, one with a fresh ``message_id`` and one without, alternating which goes first (the
first pair warms up). Repeated ``--rounds`` times on fresh sessions; prints p25/p50/p75 of each
side, side by side.

Run: ``.venv/bin/python bench/resend_bench.py [--rounds 4] [--pairs 7]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from temporalio.client import Client

BENCH_DIR = Path(__file__).resolve().parent
for path in (BENCH_DIR, BENCH_DIR.parent):  # _stats; tests.support, tests.server
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from tests.server.support import ended, helper_app, serving, stream  # noqa: E402
from tests.support.gate_tool import GateTool  # noqa: E402
from tests.support.temporal import temporal_environment  # noqa: E402

from _stats import pct  # noqa: E402
from durable_agent.ai import Reply, ScriptedModel  # noqa: E402
from durable_agent.stores import FileStore  # noqa: E402
from durable_agent.workflows import AgentSpec  # noqa: E402

ENDED_RUNS = 5


async def _round(
    temporal: Client, pairs: int, with_id: list[float], without: list[float], root: Path
) -> None:
    gate = GateTool()
    replies = [Reply(text=f"ok {i}") for i in range(ENDED_RUNS)]
    replies += [Reply.call("gate", id="g"), Reply(text="done")]
    spec = AgentSpec(model=ScriptedModel(replies), tools=[gate.tool])
    async with (
        helper_app(temporal, FileStore(root), spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = f"resend-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            for i in range(ENDED_RUNS):
                await client.post(f"/v1/sessions/{sid}/runs", json={"text": "q", "run_id": f"r{i}"})
                await reader.until(ended(f"r{i}"), within=60)
            await client.post(f"/v1/sessions/{sid}/runs", json={"text": "go", "run_id": "held"})
            await asyncio.wait_for(gate.started.wait(), 60)
            await asyncio.sleep(2)  # visibility lists the ended runs
            for k in range(pairs):
                for named in (True, False) if k % 2 else (False, True):
                    body: dict[str, str] = {"text": f"m{k}"}
                    if named:
                        body["message_id"] = uuid.uuid4().hex[:16]
                    began = time.perf_counter()
                    sent = await client.post(f"/v1/sessions/{sid}/messages", json=body)
                    took = (time.perf_counter() - began) * 1000
                    assert sent.status_code == 202, sent.text
                    if k:
                        (with_id if named else without).append(took)
            gate.release.set()
            await reader.until(ended("held"), within=60)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=7, help="at most 8: a run holds 16 messages")
    args = parser.parse_args()
    with_id: list[float] = []
    without: list[float] = []
    with tempfile.TemporaryDirectory(prefix="resend-bench-") as tmp:
        async with temporal_environment() as temporal:
            for i in range(args.rounds):
                await _round(temporal, min(args.pairs, 8), with_id, without, Path(tmp) / str(i))
    for label, xs in (("without an ID (as before)", without), ("with a client's ID", with_id)):
        quartiles = " / ".join(f"{pct(xs, q):.1f}" for q in (0.25, 0.5, 0.75))
        print(f"POST /messages {label:<26} n={len(xs):<3} p25/p50/p75 ms: {quartiles}")
    print(f"added by the ended runs' offers, p50: {pct(with_id, 0.5) - pct(without, 0.5):+.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
