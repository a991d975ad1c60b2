"""Benchmark part (e): the continue-as-new input a 1 MB-message conversation carries.

One run of ``turns`` tool turns, each with a ``size``-byte reply and a ``size``-byte tool result,
continued-as-new after every turn. Read from the server: the decoded size of every
``WorkflowExecutionContinuedAsNew`` input (now: the last two turns' events, bodies left out).
Side by side, what the carry before ``bounded-can-v1`` weighed: the last turn's events with their
bodies, computed from the events the client received, re-encoded whole. With 1 MB messages that
exceeds Temporal's 2 MB limit, so before the change such a run never got past its first
continue-as-new (the workflow task failed on every attempt until the run timed out).

Standalone: ``.venv/bin/python bench/_can_size.py`` (starts its own dev server, ~15 s). In
``temporal_bench.py``: ``results["can_size"] = await bench_can_size(client, store)`` and
``print_can_size(results["can_size"])`` under ``--only e``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_agent import Event, new, tool
from durable_agent.activities.contracts import event_to_wire
from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall
from durable_agent.session import Store
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker
from durable_agent.workflows import run_workflow_id as workflow_id

__all__ = ["bench_can_size", "print_can_size"]


def _script(turns: int, size: int) -> ScriptedModel:
    def respond(request: ModelRequest) -> Reply:
        done = sum(1 for m in request.messages if m.role == "tool_result")
        if done >= turns:
            return Reply(text="done")
        call = ToolCall(id=f"t{done}", name="blob", arguments={"size": size})
        return Reply(text="r" * size, tool_calls=[call], chunk_size=2 * size)

    return ScriptedModel(respond)


@tool
async def blob(size: int) -> str:
    """Returns ``size`` bytes."""
    return "b" * size


async def _can_inputs(client: Client, wid: str) -> list[int]:
    """Decoded continue-as-new input sizes of every execution of ``wid``, oldest first."""
    run: str | None = None
    sizes: list[int] = []
    while True:
        history = json.loads(
            (await client.get_workflow_handle(wid, run_id=run).fetch_history()).to_json()
        )
        for event in history["events"]:
            attrs = event.get("workflowExecutionContinuedAsNewEventAttributes")
            if attrs:
                data = attrs["input"]["payloads"]
                sizes.insert(0, sum(len(base64.b64decode(p["data"])) for p in data))
        first = history["events"][0]["workflowExecutionStartedEventAttributes"]
        run = first.get("continuedExecutionRunId")
        if not run:
            return sizes


def _bodies_carry(events: list[Event]) -> int:
    """Bytes of one tool turn's events encoded whole (what the old input carried)."""
    turn: list[Event] = []
    for event in events:
        if event.agent is not None and event.agent.type == "turn_start":
            turn = []
        turn.append(event)
        if event.agent is not None and event.agent.type == "turn_end" and len(turn) > 3:
            break
    return sum(len(event_to_wire(e).model_dump_json().encode()) for e in turn)


async def bench_can_size(
    client: Client,
    store: Store | None = None,
    *,
    turns: int = 3,
    size: int = 1_000_000,
    worker_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the conversation; return the carried input sizes (now) and the bodies' weight."""
    store = store or MemoryStore()
    queue = f"bench-can-{uuid.uuid4().hex[:8]}"
    agents = {"can": AgentSpec(model=_script(turns, size), tools=[blob])}
    worker = await create_worker(
        client, task_queue=queue, store=store, agents=agents, **(worker_options or {})
    )
    async with worker:
        ex = TemporalExecutor(client, task_queue=queue, continue_as_new_after_turns=1)
        agent = await new("can", store=store, executor=ex)
        rid = uuid.uuid4().hex[:16]
        t0 = time.perf_counter()
        stream = await agent.run("go", run_id=rid)
        events = [e async for e in stream.events()]
        seconds = time.perf_counter() - t0
        carried = await _can_inputs(client, workflow_id(agent.session_id, rid))
    return {
        "message_bytes": size,
        "turns": turns,
        "run_seconds": seconds,
        "can_input_bytes": carried,
        "bodies_bytes": _bodies_carry(events),
    }


def print_can_size(res: dict[str, Any]) -> None:
    print(
        f"\n(e) continue-as-new input, {res['turns']} turns of "
        f"{res['message_bytes'] / 1e6:.1f} MB reply + tool result, continued after every turn"
    )
    carried = res["can_input_bytes"]
    print(f"  before (last turn, bodies):  {res['bodies_bytes']:,} B  > 2,097,152: the run wedged")
    print(f"  after (last 2 turns, IDs):   {', '.join(f'{n:,} B' for n in carried)}")
    print(f"  run of {res['turns']} turns: {res['run_seconds']:.1f} s")


HERE = Path(__file__).resolve().parent


async def _main() -> None:
    sys.path.insert(0, str(HERE))
    from _servers import start_dev_server

    root = Path(tempfile.mkdtemp(prefix="can-size-"))
    server = await start_dev_server(root / "server")
    try:
        print_can_size(await bench_can_size(await connect(server.address)))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(_main())
