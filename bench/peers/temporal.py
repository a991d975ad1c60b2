"""(1) Temporal history growth and (2) per-turn durability overhead: durable-agent's
``TemporalExecutor`` vs Pydantic AI's Temporal integration, on one dev server.

The same 100-turn conversation on both sides, one user turn per workflow, zero-latency
deterministic models: every reply ``reply NNNN`` + ~270 characters with fixed token usage; on every
5th turn the model first calls ``lookup`` (equal-sized result) and replies after it.

* durable-agent: ``create_worker`` + ``TemporalExecutor`` (as ``bench/temporal_bench.py``), one
  handle from ``new()``, 100 sequential ``run()`` + ``wait()`` calls, each its own run workflow; the
  conversation lives in the store (a ``FileStore``), not in the workflow input.
* Pydantic AI: an ``Agent`` with a ``FunctionModel`` and the ``TemporalDurability`` capability (the
  documented successor of the deprecated ``TemporalAgent`` wrapper), ``PydanticAIPlugin`` on
  client and worker, one workflow per turn that runs the agent with ``message_history`` passed in
  and returns ``all_messages()``, which the client passes to the next turn (``_pai_workflow.py``).

After every turn the turn's workflow history is read from the server (``fetch_history()``):
events, protobuf bytes, the largest event. A turn's increment is its workflow's history (each turn
adds one workflow). Temporal's 50 MB limit applies per workflow history, so the "turn reaching
50 MB" is a least-squares line through the workflow sizes of the tool turns (5, 10, .., 100: the
largest workflows on both sides), extrapolated (inf = never, if the line is flat); likewise the
turn whose largest event (in Pydantic AI's case the workflow input carrying the whole
conversation) reaches Temporal's 2 MB payload limit. Turn 100 is
a tool turn on both sides (as every 5th), so its increment is larger than turn 1's on both.
Latency per turn: client-side, ``run()`` -> ``wait()`` returned vs ``execute_workflow()`` ->
result, history reads outside the timed span. Before the figures count, both sides' messages
are read back (240 after 100 turns) and every workflow must have completed.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import _pai_workflow
from _common import TEXT, figure
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from _servers import start_dev_server
from _stats import pct
from durable_agent import new, tool
from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall, Usage
from durable_agent.stores import FileStore
from durable_agent.workflows import (
    AgentSpec,
    TemporalExecutor,
    connect,
    create_worker,
    run_workflow_id,
)

TOOL_EVERY = 5
USAGE = Usage(input=1000, output=100)
HISTORY_LIMIT = 50 * 1024 * 1024  # Temporal's default history size limit (error), per workflow
BLOB_LIMIT = 2 * 1024 * 1024  # Temporal's default limit on one payload (blob)
TRANSFER_RPS_KEY = "history.transferProcessorMaxPollRPS"  # as bench/temporal_bench.py
WARMUP_TURNS = 5
COMPLETED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED


def messages_after(turns: int) -> int:
    """user + reply per turn, + tool result + second reply on every 5th turn."""
    return 2 * turns + 2 * (turns // TOOL_EVERY)


# -- durable-agent's model and tool (the same script as _pai_workflow.respond) -----------------


def respond(request: ModelRequest) -> Reply:
    turn = sum(1 for m in request.messages if m.role == "user")
    after_tool = request.messages[-1].role != "user"
    if turn % TOOL_EVERY == 0 and not after_tool:
        call = ToolCall(id=f"call-{turn:04d}", name="lookup", arguments={"k": turn})
        return Reply(text=f"reply {turn:04d} {TEXT}", tool_calls=[call], usage=USAGE)
    return Reply(text=f"reply {turn:04d} {TEXT}", usage=USAGE)


@tool
async def lookup(k: int) -> str:
    """A deterministic tool with an equal-sized result."""
    return f"result {k:04d} {TEXT}"


# -- measuring ---------------------------------------------------------------------------------


async def history_of(client: Client, workflow_id: str) -> tuple[int, int, int]:
    """(events, protobuf bytes, largest event's bytes) of a completed workflow's history."""
    events = list((await client.get_workflow_handle(workflow_id).fetch_history()).events)
    if not events or events[-1].event_type != COMPLETED:
        raise RuntimeError(f"workflow {workflow_id} did not complete")
    sizes = [e.ByteSize() for e in events]
    return len(events), sum(sizes), max(sizes)


def reach_turn(sizes: Sequence[float], limit: float) -> float:
    """The turn at which the least-squares line through the tool turns' sizes (turns 5, 10, ..,
    each side's largest workflows, so the first to hit a limit) reaches ``limit``; inf (never) if
    that line is flat: it grows less than 1% of its mean over the turns measured (durable-agent's
    run workflows differ by a few dozen bytes of ids and timestamps)."""
    xs = list(range(TOOL_EVERY, len(sizes) + 1, TOOL_EVERY))
    ys = [sizes[x - 1] for x in xs]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    if slope * (xs[-1] - xs[0]) < 0.01 * my:
        return float("inf")
    return (limit - (my - slope * mx)) / slope


async def conversation_ours(
    client: Client, store: FileStore, executor: TemporalExecutor, turns: int, measure: bool
) -> dict[str, Any]:
    agent = await new("chat", store=store, executor=executor)
    latency: list[float] = []
    per_turn: list[tuple[int, int, int]] = []
    for i in range(1, turns + 1):
        run_id = f"r{i:04d}"
        t0 = time.perf_counter()
        await (await agent.run(f"question {i:04d} {TEXT}", run_id=run_id)).wait()
        latency.append(time.perf_counter() - t0)
        if measure:
            per_turn.append(await history_of(client, run_workflow_id(agent.session_id, run_id)))
    n = len(await store.load_entries(agent.session_id))
    if n != messages_after(turns):
        raise RuntimeError(f"durable-agent stored {n} entries after {turns} turns")
    return {"latency": latency, "per_turn": per_turn, "messages": n}


async def conversation_pai(client: Client, queue: str, turns: int, measure: bool) -> dict[str, Any]:
    conv = uuid.uuid4().hex[:8]
    history: list[Any] = []
    latency: list[float] = []
    per_turn: list[tuple[int, int, int]] = []
    for i in range(1, turns + 1):
        wid = f"pai-{conv}-{i:04d}"
        t0 = time.perf_counter()
        history = await client.execute_workflow(
            _pai_workflow.PaiTurn.run,
            args=[f"question {i:04d} {TEXT}", history],
            id=wid,
            task_queue=queue,
            execution_timeout=timedelta(minutes=5),
        )
        latency.append(time.perf_counter() - t0)
        if measure:
            per_turn.append(await history_of(client, wid))
    if len(history) != messages_after(turns):
        raise RuntimeError(f"Pydantic AI returned {len(history)} messages after {turns} turns")
    return {"latency": latency, "per_turn": per_turn, "messages": len(history)}


@contextlib.asynccontextmanager
async def workers(
    ours: Client, pai: Client, store: FileStore
) -> AsyncIterator[tuple[TemporalExecutor, str]]:
    q_ours = f"peers-da-{uuid.uuid4().hex[:8]}"
    q_pai = f"peers-pai-{uuid.uuid4().hex[:8]}"
    w_ours = await create_worker(
        ours,
        task_queue=q_ours,
        store=store,
        agents={"chat": AgentSpec(model=ScriptedModel(respond), tools=(lookup,))},
    )
    w_pai = Worker(pai, task_queue=q_pai, workflows=[_pai_workflow.PaiTurn])
    async with w_ours, w_pai:
        executor = TemporalExecutor(ours, task_queue=q_ours, execution_timeout=timedelta(minutes=5))
        yield executor, q_pai


def side_figures(runs: list[dict[str, Any]], turns: int) -> dict[str, list[float]]:
    """Per repetition: the figures of one side."""
    out: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    for r in runs:
        ev = [p[0] for p in r["per_turn"]]
        by = [p[1] for p in r["per_turn"]]
        big = [p[2] for p in r["per_turn"]]
        add("turn1_bytes", by[0])
        add(f"turn{turns}_bytes", by[-1])
        add("turn1_events", ev[0])
        add(f"turn{turns}_events", ev[-1])
        add("total_bytes", sum(by))
        add("total_events", sum(ev))
        add("reach_50mb", reach_turn(by, HISTORY_LIMIT))
        add(f"largest_event_turn{turns}", big[-1])
        add("reach_2mb_payload", reach_turn(big, BLOB_LIMIT))
        add("p50", pct(r["latency"], 0.5) * 1000)
        add("p95", pct(r["latency"], 0.95) * 1000)
    return out


async def bench_temporal(reps: int, turns: int = 100) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="peers-temporal-"))
    server = await start_dev_server(root / "server", dynamic_config={TRANSFER_RPS_KEY: 1000})
    print(f"Temporal dev server {server.address} (pid {server.pid})", flush=True)
    try:
        ours = await connect(server.address)
        pai = await Client.connect(server.address, plugins=[PydanticAIPlugin()])
        store = FileStore(root / "store")
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "pai": []}
        async with workers(ours, pai, store) as (executor, q_pai):
            # same warm-up on both sides: a short conversation with a tool turn
            await conversation_ours(ours, store, executor, WARMUP_TURNS, measure=False)
            await conversation_pai(pai, q_pai, WARMUP_TURNS, measure=False)
            for rep in range(reps):  # alternate which side goes first
                order = ["ours", "pai"] if rep % 2 == 0 else ["pai", "ours"]
                for side in order:
                    if side == "ours":
                        r = await conversation_ours(ours, store, executor, turns, measure=True)
                    else:
                        r = await conversation_pai(pai, q_pai, turns, measure=True)
                    runs[side].append(r)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    a, b = side_figures(runs["ours"], turns), side_figures(runs["pai"], turns)
    rows = [
        figure("(1) turn-1 workflow history", "bytes", a["turn1_bytes"], b["turn1_bytes"], "lower"),
        figure(
            f"(1) turn-{turns} workflow history",
            "bytes",
            a[f"turn{turns}_bytes"],
            b[f"turn{turns}_bytes"],
            "lower",
        ),
        figure(
            "(1) turn-1 workflow events", "events", a["turn1_events"], b["turn1_events"], "lower"
        ),
        figure(
            f"(1) turn-{turns} workflow events",
            "events",
            a[f"turn{turns}_events"],
            b[f"turn{turns}_events"],
            "lower",
        ),
        figure(
            f"(1) total history, {turns} turns",
            "bytes",
            a["total_bytes"],
            b["total_bytes"],
            "lower",
        ),
        figure(
            f"(1) total events, {turns} turns",
            "events",
            a["total_events"],
            b["total_events"],
            "lower",
        ),
        figure(
            "(1) turn whose workflow hits 50 MB (extrap.)",
            "turn",
            a["reach_50mb"],
            b["reach_50mb"],
            "higher",
        ),
        figure(
            f"(1) largest event, turn {turns}",
            "bytes",
            a[f"largest_event_turn{turns}"],
            b[f"largest_event_turn{turns}"],
            "lower",
        ),
        figure(
            "(1) turn whose largest event hits 2 MB (ext.)",
            "turn",
            a["reach_2mb_payload"],
            b["reach_2mb_payload"],
            "higher",
        ),
        figure("(2) per-turn latency p50", "ms", a["p50"], b["p50"], "lower"),
        figure("(2) per-turn latency p95", "ms", a["p95"], b["p95"], "lower"),
    ]
    return {
        "turns": turns,
        "reps": reps,
        "warmup_turns": WARMUP_TURNS,
        "server": "temporal server start-dev, SQLite + WAL, "
        f"{TRANSFER_RPS_KEY}=1000 (as bench/temporal_bench.py)",
        "peer": "pydantic_ai.durable_exec.temporal: Agent + TemporalDurability + PydanticAIPlugin,"
        " FunctionModel, one workflow per turn with message_history passed in",
        "extrapolated": ["reach_50mb", "reach_2mb_payload"],
        "messages_read_back": {
            "durable_agent": [r["messages"] for r in runs["ours"]],
            "peer": [r["messages"] for r in runs["pai"]],
        },
        "per_turn": {
            side: {
                "events": [[p[0] for p in r["per_turn"]] for r in rs],
                "bytes": [[p[1] for p in r["per_turn"]] for r in rs],
                "latency_ms": [[x * 1000 for x in r["latency"]] for r in rs],
            }
            for side, rs in (("durable_agent", runs["ours"]), ("peer", runs["pai"]))
        },
        "rows": rows,
    }


__all__ = ["bench_temporal"]
