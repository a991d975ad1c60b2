"""Part (d) of the Temporal benchmark: live token deltas.

1. **Channel choice.** Publish -> visible latency of each candidate side channel, with a writer
   publishing every 20 ms and a reader polling every 20 ms as the client does: the MongoDB
   collection (on FerretDB, the test server), the FileStore side files, and activity heartbeat
   details read by ``describe()`` (the SDK throttles heartbeats, so that one lags by the throttle).
2. **Model emit -> client visible.** A ScriptedModel emitting one 4-character token every 20 ms,
   a worker and a client in this process on the given dev server (loopback): for every token, the
   time from the model yielding it to the client's ``message_update`` showing it.
   At the worker's default pace (a write a second) and at 0.35 s (``live_every``), side by side.
3. **History per turn** of the same tool-calling run with live deltas on and off (equal: deltas
   never enter workflow history), and the **side channel's size** during and after the run
   (bounded: a stored reply's deltas are removed after the worker's grace period).

``bench_deltas(client, root)`` returns the figures, ``print_deltas(results)`` prints them; the
lead hooks both into ``temporal_bench.py --only d``. Standalone: ``python bench/_delta_latency.py``.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.ferretdb
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import pct
from durable_agent import new, tool
from durable_agent.ai import ModelEvent, ModelRequest, Reply, ScriptedModel, ToolCall
from durable_agent.session import Store
from durable_agent.session.deltas import Delta, DeltaKey, LiveStore
from durable_agent.stores import FileStore
from durable_agent.stores.file import FileDeltas
from durable_agent.workflows import (
    AgentSpec,
    TemporalExecutor,
    create_worker,
    run_workflow_id,
)

__all__ = ["bench_deltas", "print_deltas"]

TOKEN = 0.02
TEXT = " ".join(f"tok{i:02d}"[:4] for i in range(60))  # 60 four-character tokens (with spaces)


def _ms(xs: list[float]) -> dict[str, float]:
    return {"p50": pct(xs, 0.5) * 1000, "p95": pct(xs, 0.95) * 1000, "n": float(len(xs))}


# -- 1. channel candidates -----------------------------------------------------------------


async def channel_latency(store: Store, count: int = 100) -> dict[str, float]:
    """``store``'s channel, on a session it holds: a reply's delta of a session that is not
    there is refused (docs/design.md#retention)."""
    assert isinstance(store, LiveStore)
    channel = store.live_deltas()
    session_id = f"bench-{uuid.uuid4().hex[:8]}"
    await store.create_session(session_id)
    key = DeltaKey(session_id, uuid.uuid4().hex[:12], 3)
    sent: dict[int, float] = {}
    seen: list[float] = []
    done = asyncio.Event()

    async def reader() -> None:
        cursor = (0, 0)
        while not done.is_set() or cursor[1] < count:
            for delta in await channel.read(key, cursor):
                seen.append(time.perf_counter() - sent[delta.seq])
                cursor = (delta.attempt, delta.seq)
            await asyncio.sleep(TOKEN)

    task = asyncio.create_task(reader())
    write: list[float] = []
    for seq in range(1, count + 1):
        sent[seq] = t0 = time.perf_counter()
        await channel.publish(key, Delta(attempt=1, seq=seq, size=1, ops=[(0, "+", "abcd")]))
        write.append(time.perf_counter() - t0)
        await asyncio.sleep(random.uniform(0.5, 1.5) * TOKEN)  # not in step with the reader
    done.set()
    await asyncio.wait_for(task, 10)
    await channel.clear(key)
    return {**_ms(seen), "write_p50": pct(write, 0.5) * 1000}


_BEAT_SENT: dict[int, float] = {}


@activity.defn(name="bench.beating")
async def _beating(count: int) -> None:
    for seq in range(1, count + 1):
        _BEAT_SENT[seq] = time.perf_counter()
        activity.heartbeat(seq)
        await asyncio.sleep(TOKEN)


@workflow.defn(name="bench.heartbeats")
class _HeartbeatWorkflow:
    @workflow.run
    async def run(self, count: int) -> None:
        await workflow.execute_activity(
            "bench.beating",
            count,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=2),
        )


async def heartbeat_latency(client: Client, count: int = 100) -> dict[str, float]:
    """Heartbeat details as the channel: the client polls ``describe()`` every 20 ms."""
    q = f"bench-hb-{uuid.uuid4().hex[:8]}"
    seen: list[float] = []
    async with Worker(
        client,
        task_queue=q,
        workflows=[_HeartbeatWorkflow],
        activities=[_beating],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_heartbeat_throttle_interval=timedelta(seconds=0.5),  # what create_worker sets
    ):
        handle = await client.start_workflow(
            "bench.heartbeats", count, id=q, task_queue=q, execution_timeout=timedelta(seconds=60)
        )
        last = 0
        while True:
            desc = await handle.describe()
            if desc.status is not None and desc.status.name != "RUNNING":
                break
            now = time.perf_counter()
            for pending in desc.raw_description.pending_activities:
                payloads = pending.heartbeat_details.payloads
                if payloads:
                    [seq] = client.data_converter.payload_converter.from_payloads(payloads)
                    # every update up to seq is visible now (the throttle drops the ones between)
                    seen += [now - _BEAT_SENT[s] for s in range(last + 1, int(seq) + 1)]
                    last = max(last, int(seq))
            await asyncio.sleep(TOKEN)
    return _ms(seen)


# -- 2 and 3. end to end --------------------------------------------------------------------


class TimedModel:
    """The scripted model, noting when each text length was emitted."""

    def __init__(self, replies: list[Reply]) -> None:
        self.inner = ScriptedModel(replies)
        self.emitted: list[tuple[int, float]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in self.inner.stream(request):
            if event.type == "text_delta":
                self.emitted.append((len(event.partial.text()), time.perf_counter()))
            yield event


async def _held(store: Store, session_id: str) -> int:
    if not isinstance(store, LiveStore):
        return -1
    channel = store.live_deltas()
    if isinstance(channel, FileDeltas):
        return channel.size(session_id)
    size = getattr(channel, "size", None)
    return int(await size()) if size is not None else -1


async def one_run(
    client: Client, store: Store, turns: int, *, live: bool, live_every: float | None = None
) -> dict[str, Any]:
    @tool
    async def step() -> str:
        """One step."""
        return "done"

    replies = [
        Reply(
            text=TEXT,
            tool_calls=[ToolCall(id=f"c{i}", name="step", arguments={})],
            chunk_size=5,
            chunk_delay=TOKEN,
        )
        for i in range(turns - 1)
    ] + [Reply(text=TEXT, chunk_size=5, chunk_delay=TOKEN)]
    model = TimedModel(replies)
    q, session, rid = (
        f"bench-d-{uuid.uuid4().hex[:8]}",
        f"d-{uuid.uuid4().hex[:8]}",
        uuid.uuid4().hex,
    )
    latencies: list[float] = []
    held: list[int] = []
    worker = await create_worker(
        client,
        task_queue=q,
        store=store,
        agents={"timed": AgentSpec(model=model, tools=[step])},
        live_deltas="auto" if live else None,
        **({} if live_every is None else {"live_every": live_every}),
    )
    async with worker:
        executor = TemporalExecutor(client, task_queue=q)
        agent = await new("timed", store=store, session_id=session, executor=executor)
        stream = await agent.run("go", run_id=rid)
        cursor = 0
        async for event in stream.events():
            inner = event.agent
            if inner is None:
                continue
            if inner.type == "message_update" and inner.message is not None:
                now, shown = time.perf_counter(), len(inner.message.text())
                while cursor < len(model.emitted) and model.emitted[cursor][0] <= shown:
                    latencies.append(now - model.emitted[cursor][1])
                    cursor += 1
            elif (
                inner.type == "message_end" and inner.message and inner.message.role == "assistant"
            ):
                cursor = len(model.emitted)  # a new reply's lengths start over
                held.append(await _held(store, session))
        await stream.wait()
        history = await client.get_workflow_handle(run_workflow_id(session, rid)).fetch_history()
        after = 0.0
        if live:  # the worker clears a stored reply's deltas after its grace period
            t0 = time.perf_counter()
            while await _held(store, session) > 0 and time.perf_counter() - t0 < 30:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            after = time.perf_counter() - t0
    raw = history.to_json().encode()
    return {
        "latency": _ms(latencies),
        "history_events": len(history.events),
        "history_bytes_per_turn": len(raw) / turns,
        "held_at_each_reply": held,
        "held_after": await _held(store, session),
        "cleared_after_s": after,
        "entries": len(await store.load_entries(session)),
    }


async def bench_deltas(client: Client, root: Path, *, turns: int = 10) -> dict[str, Any]:
    from pymongo import AsyncMongoClient
    from tests.support.ferretdb import start_ferretdb

    from durable_agent.stores.mongo import MongoStore

    root.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
    ferret = start_ferretdb(root / "ferretdb")
    results: dict[str, Any] = {"turns": turns, "token_seconds": TOKEN}
    try:
        mongo: AsyncMongoClient[Any] = AsyncMongoClient(ferret.uri)
        database = mongo["bench_deltas"]
        results["channels"] = {
            "mongo (FerretDB)": await channel_latency(MongoStore(database)),
            "file": await channel_latency(FileStore(root / "files")),
            "heartbeat details": await heartbeat_latency(client),
        }
        for name, store in (
            ("file", FileStore(root / "sessions")),
            ("mongo", MongoStore(database)),
        ):
            results[name] = {
                "on": await one_run(client, store, turns, live=True),
                "on, 0.35 s": await one_run(client, store, turns, live=True, live_every=0.35),
                "off": await one_run(client, store, turns, live=False),
            }
        await mongo.close()
    finally:
        ferret.stop()
    return results


def print_deltas(results: dict[str, Any]) -> None:
    print("\n(d) live token deltas")
    print("  channel candidates, publish -> visible (writer and reader every 20 ms):")
    for name, c in results["channels"].items():
        extra = f", write p50 {c['write_p50']:.1f} ms" if "write_p50" in c else ""
        print(f"    {name:18} p50 {c['p50']:6.1f} ms  p95 {c['p95']:6.1f} ms{extra}")
    for store in ("file", "mongo"):
        on, off = results[store]["on"], results[store]["off"]
        lat = on["latency"]
        fast = results[store]["on, 0.35 s"]["latency"]
        print(
            f"  {store}: delta latency p50 {lat['p50']:.0f} ms p95 {lat['p95']:.0f} ms "
            f"({lat['n']:.0f} tokens, one every {results['token_seconds'] * 1000:.0f} ms); "
            f"written every 0.35 s: p50 {fast['p50']:.0f} ms p95 {fast['p95']:.0f} ms"
        )
        print(
            f"    history per turn: streaming on {on['history_bytes_per_turn']:.0f} B / "
            f"off {off['history_bytes_per_turn']:.0f} B; events on {on['history_events']} / "
            f"off {off['history_events']}"
        )
        print(
            f"    side channel held at each reply's receipt: {on['held_at_each_reply']}; "
            f"{on['held_after']} after {on['cleared_after_s']:.1f} s; "
            f"store entries {on['entries']}"
        )


async def _standalone() -> None:
    import tempfile

    from _servers import start_dev_server
    from durable_agent.workflows import connect

    root = Path(tempfile.mkdtemp(prefix="delta-bench-"))
    server = await start_dev_server(root / "server")
    try:
        client = await connect(server.address)
        print_deltas(await bench_deltas(client, root))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(_standalone())
