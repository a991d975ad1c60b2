"""What a run costs in Temporal actions, whatever its model's latency (docs/design.md#receipts,
docs/design.md#temporal): a client that streams a multi-second reply, live tokens on, asks the
workflow nothing (its events come from the store, its end from the result's long poll); a worker
killed mid-call is noticed within the heartbeat timeout although calls send almost no
heartbeats; and lifecycle events start a publish workflow only when a worker on the queue has a
publisher. Queries and workflow starts are counted by a client interceptor.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    StartWorkflowInput,
)

from durable_agent import Reply, ScriptedModel, ToolCall, new, tool
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from durable_agent.workflows.store_check import poller_identities
from tests.support.live_worker import AGENT, MARKER
from tests.support.polling import eventually
from tests.support.temporal import running_worker
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import CRASH, consume, executor, queue, run_id, sid, wait_for_file
from tests.temporal.test_live_tokens import concatenated, replies, start_live

pytestmark = pytest.mark.temporal


class Counting(Interceptor):
    """Counts the client's queries (by name) and workflow starts (by type)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counts = self.counts

        class _Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                counts[f"query:{input.query}"] += 1
                return await super().query_workflow(input)

            async def start_workflow(self, input: StartWorkflowInput) -> Any:
                counts[f"start:{input.workflow}"] += 1
                return await super().start_workflow(input)

        return _Outbound(next)

    def client(self, base: Client) -> Client:
        config = base.config()
        config["interceptors"] = [*config.get("interceptors", ()), self]
        return Client(**config)


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    await asyncio.sleep(0.5)
    return f"value of {key}"


STREAMED = "A reply that streams for a couple of seconds, token by token. " * 3


async def test_a_streamed_multi_second_run_asks_the_workflow_nothing(
    temporal_client: Client, tmp_path: Any
) -> None:
    counting = Counting()
    client = counting.client(temporal_client)
    lm = ScriptedModel(
        [
            Reply(
                text="Checking.",
                tool_calls=[ToolCall(id="k1", name="lookup", arguments={"key": "a"})],
                chunk_size=3,
                chunk_delay=0.05,
            ),
            Reply(text=STREAMED, chunk_size=6, chunk_delay=0.06),  # about 2 s
            Reply(text=STREAMED, chunk_size=6, chunk_delay=0.06),
        ]
    )
    store, q = FileStore(tmp_path / "sessions"), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=lm, tools=[lookup])}, task_queue=q
    ):
        agent = await new("a", store=store, session_id=sid("cost"), executor=executor(client, q))
        counting.counts.clear()
        started = time.monotonic()
        outcome = await consume(await agent.run("go", run_id=run_id()))
        took = time.monotonic() - started
        waited = await consume(await agent.run("and again, waiting only"))
    assert outcome.error is None and waited.error is None, (outcome.error, waited.error)
    assert took > 2.0  # multi-second, streamed
    [(_, _), (second, reply)] = replies(outcome.events)
    # streamed: its first text at once, then a batch a second, before the stored reply
    assert len(second) >= 2 and concatenated(second) == reply.text() == STREAMED
    queries = {k: n for k, n in counting.counts.items() if k.startswith("query:")}
    assert queries == {}, queries
    assert counting.counts["start:durable_agent.run"] == 2


async def test_a_worker_killed_mid_call_is_retried_within_the_heartbeat_timeout(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Any
) -> None:
    """SIGKILL while a model call streams (no heartbeat yet: the call is younger than half the
    timeout): the server schedules the retry when the heartbeat timeout runs out, counted from
    the call's start, so within one timeout of the kill."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = [
        "--address",
        address,
        "--task-queue",
        q,
        "--markers",
        str(markers),
        "--root",
        str(root),
    ]
    first = start_live(worker_processes, *common, "--crash")
    await wait_for_file(markers / f"ready-{first.pid}")
    session, rid = sid("kill"), run_id()
    agent = await new(
        AGENT,
        store=FileStore(root),
        session_id=session,
        executor=executor(temporal_client, q, timeouts=CRASH),
    )
    seen = asyncio.create_task(consume(await agent.run("go", run_id=rid)))
    await wait_for_file(markers / MARKER)
    handle = temporal_client.get_workflow_handle(run_workflow_id(session, rid))
    worker_processes.kill(first)
    killed = time.monotonic()

    async def retried() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(p.attempt >= 2 for p in pending)

    await eventually(retried, within=30, interval=0.05, what="the retry")
    took = time.monotonic() - killed
    start_live(worker_processes, *common)
    outcome = await asyncio.wait_for(seen, 60)
    assert outcome.error is None, repr(outcome.error)
    # within the timeout (plus the server's timer tick and this poll's own interval)
    assert took <= CRASH.model_heartbeat + 1.0, f"retry scheduled {took:.2f}s after the kill"


async def test_lifecycle_events_start_a_workflow_only_when_a_worker_has_a_publisher(
    temporal_client: Client,
) -> None:
    counting = Counting()
    client = counting.client(temporal_client)
    published: list[Any] = []
    store = MemoryStore()
    lm = ScriptedModel(["x"])
    for publisher in (None, published.append):
        q = queue()
        async with running_worker(
            temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q, publisher=publisher
        ):

            async def polled(q: str = q) -> bool:
                return bool(await poller_identities(client, q))

            await eventually(polled, within=20, what="the worker polling")
            counting.counts.clear()
            agent = await new("a", store=store, session_id=sid("pub"), executor=executor(client, q))
            await agent.branch("")
            starts = counting.counts["start:durable_agent.publish"]
            if publisher is None:
                assert starts == 0
            else:
                assert starts == 2

                async def delivered() -> bool:
                    return len(published) == 2

                await eventually(delivered, within=20, what="the events")
    # one publish workflow per event: they run concurrently, so delivery order is not promised
    assert sorted(e.type for e in published) == ["session_branched", "session_init"]
