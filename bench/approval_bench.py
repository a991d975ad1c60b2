"""Approvals and steering on Temporal: what a decision and a steer cost
(docs/design.md#approvals-and-steering).

On one dev server (SQLite + WAL), a worker in this process (one clock for both ends), a
MemoryStore and a scripted model:

- **decision -> tool start**: from ``agent.decide(...)`` to the approved tool's first line on the
  worker, p50/p95 over ``--runs`` runs, against a bare update round trip (an update whose handler
  returns at once) on the same server; the ratio at p50;
- **history events per approval**: a run whose one call needs approval against the same run
  whose call does not (request and decision together);
- **no growth while waiting**: the run's history length right after ``approval_requested`` and
  again ``--idle`` seconds later (the time-skipping test in tests/temporal/test_approvals.py
  checks the same over three days);
- **steer -> stored**: from ``stream.send(...)`` to its return (the message stored and
  delivered) when the run is at a tool call that finishes as the steer is sent.

Run: ``.venv/bin/python bench/approval_bench.py [--runs 30] [--idle 3]``; writes
``bench/results/approvals.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _bare_update import BareUpdates  # noqa: E402
from _servers import start_dev_server  # noqa: E402
from _stats import pct  # noqa: E402

CLIENT: list[Any] = []
STARTED: list[float] = []
STARTED_NOW = asyncio.Event()
RELEASE = asyncio.Event()


def tools() -> tuple[Any, ...]:
    from durable_agent import tool

    @tool(approval=True)
    async def gated(n: int) -> str:
        """A call a person approves."""
        STARTED.append(time.perf_counter())
        STARTED_NOW.set()
        return f"ran {n}"

    @tool
    async def free(n: int) -> str:
        """The same call, needing no approval."""
        return f"ran {n}"

    @tool
    async def hold(n: int) -> str:
        """A call that finishes when the steer is sent."""
        await RELEASE.wait()
        return f"held {n}"

    return gated, free, hold


def script(name: str) -> Any:
    """A scripted model as a function of the request: a call of ``name`` after each question,
    then a short answer (so a late steer's extra model call never runs out of script)."""
    from durable_agent import Reply, ToolCall

    def respond(request: Any) -> Any:
        last = request.messages[-1]
        if last.role == "user" and not last.text().startswith("also"):
            call = ToolCall(id=f"{name}{len(request.messages)}", name=name, arguments={"n": 1})
            return Reply(tool_calls=[call])
        return Reply(text="done")

    return respond


async def history_length(client: Any, session_id: str, run_id: str, timer: bool = False) -> int:
    """Events in the run's history; ``timer``: once the wait's timer is in it (the client sees
    the requests in the store a moment before the workflow task that starts the wait ends)."""
    from temporalio.api.enums.v1 import EventType

    from durable_agent.workflows import run_workflow_id

    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id))
    for _ in range(1000):
        events = (await handle.fetch_history()).events
        if not timer or any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events):
            return len(events)
    raise RuntimeError("the wait's timer never started")


async def until(stream: Any, kind: str) -> Any:
    """Read events until one of ``kind``; returns the events iterator to finish later."""
    events = stream.events()
    async for event in events:
        if event.agent is not None and event.agent.type == kind:
            return events
    raise RuntimeError(f"the run ended without {kind}")


async def decisions(client: Any, agent: Any, runs: int, idle: float) -> dict[str, Any]:
    took: list[float] = []
    lengths: tuple[int, int] = (0, 0)
    for i in range(runs):
        stream = await agent.run(f"go {i}")
        events = await until(stream, "approval_requested")
        if i == 0:
            first = await history_length(client, agent.session_id, stream.run_id, timer=True)
            await asyncio.sleep(idle)  # nobody decides: the history must not grow
            lengths = (first, await history_length(client, agent.session_id, stream.run_id))
        STARTED.clear()
        STARTED_NOW.clear()
        t0 = time.perf_counter()
        await agent.decide(agent.pending_approvals()[0].tool_call_id, True)
        await STARTED_NOW.wait()  # the tool runs in this process
        took.append(STARTED[0] - t0)
        async for _ in events:
            pass
    return {"took": took, "waiting_history": lengths}


async def bare_updates(client: Any, queue: str, runs: int) -> list[float]:
    handle = await client.start_workflow(
        BareUpdates.run, id=f"bare-{uuid.uuid4().hex}", task_queue=queue
    )
    took: list[float] = []
    for i in range(runs):
        t0 = time.perf_counter()
        await handle.execute_update(BareUpdates.ping, i)
        took.append(time.perf_counter() - t0)
    await handle.execute_update(BareUpdates.stop)
    return took


async def events_per_approval(client: Any, make: Any) -> int:
    lengths: dict[str, int] = {}
    for name in ("gated", "free"):
        agent = await make(name, 1)
        stream = await agent.run("once")
        if name == "gated":
            events = await until(stream, "approval_requested")
            await agent.decide(agent.pending_approvals()[0].tool_call_id, True)
            async for _ in events:
                pass
        else:
            await stream.wait()
        lengths[name] = await history_length(client, agent.session_id, stream.run_id)
    return lengths["gated"] - lengths["free"]


async def queued(agent: Any, stream: Any) -> None:
    from durable_agent.activities.contracts import RunState
    from durable_agent.workflows import run_workflow_id

    client = CLIENT[0]
    handle = client.get_workflow_handle(run_workflow_id(agent.session_id, stream.run_id))
    for _ in range(5000):  # a query per round trip until the run holds the steer
        if (await handle.query("state", result_type=RunState)).queued_inputs:
            return


async def steers(agent: Any, runs: int) -> list[float]:
    took: list[float] = []
    for i in range(runs):
        RELEASE.clear()
        stream = await agent.run(f"hold {i}")
        events = await until(stream, "tool_execution_start")
        t0 = time.perf_counter()
        sending = asyncio.ensure_future(stream.send("also this"))
        await queued(agent, stream)  # the run holds it: it lands after this call's result
        RELEASE.set()
        await sending
        took.append(time.perf_counter() - t0)
        async for _ in events:
            pass
    return took


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from temporalio.worker import Worker

    from durable_agent import ScriptedModel, new
    from durable_agent.stores import MemoryStore
    from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker

    root = Path(tempfile.mkdtemp(prefix="approval-bench-"))
    server = await start_dev_server(root / "server")
    try:
        client = await connect(server.address)
        CLIENT.append(client)
        store, queue = MemoryStore(), f"approvals-{uuid.uuid4().hex[:8]}"
        gated, free, hold = tools()
        agents = {
            n: AgentSpec(model=ScriptedModel(script(n)), tools=(t,))
            for n, t in (("gated", gated), ("free", free), ("hold", hold))
        }
        worker = await create_worker(client, task_queue=queue, store=store, agents=agents)
        bare = Worker(client, task_queue=f"{queue}-bare", workflows=[BareUpdates])
        async with worker, bare:

            async def make(name: str, _runs: int) -> Any:
                return await new(
                    name, store=store, executor=TemporalExecutor(client, task_queue=queue)
                )

            decided = await decisions(client, await make("gated", args.runs), args.runs, args.idle)
            baseline = await bare_updates(client, f"{queue}-bare", args.runs)
            per_approval = await events_per_approval(client, make)
            steered = await steers(await make("hold", args.runs), args.runs)
    finally:
        server.stop()
    took = decided["took"]
    return {
        "runs": args.runs,
        "decision_to_tool_start": {"p50": pct(took, 0.5), "p95": pct(took, 0.95)},
        "bare_update": {"p50": pct(baseline, 0.5), "p95": pct(baseline, 0.95)},
        "ratio_p50": pct(took, 0.5) / pct(baseline, 0.5),
        "history_events_per_approval": per_approval,
        "history_while_waiting": {
            "at_0s": decided["waiting_history"][0],
            f"after_{args.idle:g}s": decided["waiting_history"][1],
        },
        "steer_to_stored": {"p50": pct(steered, 0.5), "p95": pct(steered, 0.95)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--idle", type=float, default=3.0)
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    print(json.dumps(figures, indent=2))
    out = HERE / "results" / "approvals.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (the Temporal SDK can abort at exit)


if __name__ == "__main__":
    main()
