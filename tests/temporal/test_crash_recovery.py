"""Crash recovery: the worker is a subprocess, SIGKILLed at five points of a run; a fresh worker
finishes the run and the store holds every message exactly once, chained, with every receipt the
client saw naming a stored entry (docs/design.md#stamps-and-producers, docs/design.md#cancellation).
Model calls and tool runs are counted across both processes: a reply or result its producer
committed is never produced again. A zombie attempt racing its retry leaves one reply, the one the
workflow holds.

The four kill points run concurrently (each with its own task queue, session and worker
processes): most of a recovery is waiting for timeouts, so this keeps the suite short.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from temporalio.client import Client

from durable_agent import new
from durable_agent.session import Store
from durable_agent.stores import FileStore
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import run_workflow_id
from tests.support.worker_process import AGENT, CALLS_LOG, CRASH_POINTS, MARKERS
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    CRASH,
    activity_counts,
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_for_file,
)

pytestmark = pytest.mark.temporal

SIDE_EFFECTS = {
    # point: (model calls, runs of tool step 1, of step 2) over both processes; 3 turns, 2 tools
    "model": (4, 1, 1),  # the call killed mid-stream is made again
    "before-append": (4, 1, 1),  # the reply was complete but not committed: made again
    "tool": (3, 2, 1),  # the tool killed mid-run runs again
    "after-append": (3, 1, 1),  # the tool committed its result: never runs again
    "model-committed": (3, 1, 1),  # the model committed its reply: never called again
}


def side_effects(markers: Path) -> tuple[int, int, int]:
    lines = [line.split() for line in (markers / CALLS_LOG).read_text().splitlines()]
    model = sum(1 for w in lines if w[0] == "model")
    tools = [sum(1 for w in lines if w[:2] == ["tool", str(k)]) for k in (1, 2)]
    return model, tools[0], tools[1]


RECOVERY_BUDGET = 20.0
"""Seconds from the moment the killed worker is gone and the fresh one polls to the run's end
(what is left of the heartbeat 2 s + sticky 1 s + the run's rest, loaded). The fresh worker's own
start (imports, connect: seconds each when five start at once on a loaded machine) is the test's
cost, not the recovery's: counted in, it took the points over the budget."""


async def crash_and_recover(
    point: str,
    client: Client,
    address: str,
    procs: WorkerProcesses,
    base: Path,
    mongo: tuple[str, AsyncDatabase[Any]] | None = None,
) -> float:
    """One run killed at ``point`` and finished by a fresh worker; returns the recovery time.

    The store is a FileStore under ``base``, or with ``mongo`` (URI, database) a MongoStore."""
    root, markers, q = base / "sessions", base / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers), "--steps", "2"]
    if mongo is None:
        common += ["--root", str(root)]
        store: Store = FileStore(root)
    else:
        uri, database = mongo
        common += ["--mongo-uri", uri, "--mongo-db", database.name]
        store = MongoStore(database)
    first = procs.start(*common, "--crash", point)
    await wait_for_file(markers / f"ready-{first.pid}")  # it registered the search attribute

    session = sid(f"crash-{point}")
    agent = await new(
        AGENT,
        store=store,
        session_id=session,
        executor=executor(client, q, timeouts=CRASH),
    )
    rid = run_id()
    stream = await agent.run("go", run_id=rid)
    seen = asyncio.create_task(consume(stream))

    await wait_for_file(markers / MARKERS[point])
    procs.kill(first)
    second = procs.start(*common)
    await wait_for_file(markers / f"ready-{second.pid}", within=60)
    polling_at = time.monotonic()

    outcome = await asyncio.wait_for(seen, 60)
    recovery = time.monotonic() - polling_at
    assert outcome.error is None, repr(outcome.error)

    fresh = FileStore(root) if mongo is None else store  # MongoStore keeps no state
    stored = await fresh.load_entries(session)
    assert [m.role for m in messages_of(stored)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    # the client saw a receipt for everything stored, once each, in store order
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    assert outcome.messages == messages_of(stored)[1:]
    assert messages_of(stored)[-1].text() == "finished: go"
    assert [m.text() for m in messages_of(stored) if m.role == "tool_result"] == [
        "step 1 done",
        "step 2 done",
    ]
    assert agent.leaf_id == stored[-1].id
    await assert_replays(client, run_workflow_id(session, rid))
    positions_ok = outcome.types()[0] == "agent_start" and outcome.types()[-1] == "agent_end"
    assert positions_ok, outcome.types()
    assert side_effects(markers) == SIDE_EFFECTS[point], point
    return recovery


async def _all(points: tuple[str, ...], run: Callable[[str], Awaitable[float]]) -> None:
    """Run ``run(point)`` for every point concurrently; report every failure, check budgets."""
    results = await asyncio.gather(*(run(p) for p in points), return_exceptions=True)
    failures = {
        point: "".join(traceback.format_exception(r))
        for point, r in zip(points, results, strict=True)
        if isinstance(r, BaseException)
    }
    assert not failures, "\n".join(f"--- {p}:\n{tb}" for p, tb in failures.items())
    for point, recovery in zip(points, results, strict=True):
        assert isinstance(recovery, float)
        assert recovery < RECOVERY_BUDGET, f"{point}: recovery took {recovery:.1f}s"


async def test_sigkill_at_each_point_then_fresh_worker_finishes(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """FileStore: (a) mid model stream, (b) model done but its commit not started, (c) mid
    tool, (d) a tool result committed but not reported, (e) a reply committed but not
    reported."""

    async def one(point: str) -> float:
        base = tmp_path / point
        base.mkdir()
        return await crash_and_recover(point, temporal_client, address, worker_processes, base)

    await _all(CRASH_POINTS, one)


@pytest.mark.mongo
async def test_sigkill_around_appends_with_mongostore(
    temporal_client: Client,
    address: str,
    worker_processes: WorkerProcesses,
    tmp_path: Path,
    mongo_uri: str,
    mongo_database: AsyncDatabase[Any],
) -> None:
    """MongoStore, the points that test its idempotent appends: (b), (d) and (e)."""

    async def one(point: str) -> float:
        base = tmp_path / point
        base.mkdir()
        return await crash_and_recover(
            point, temporal_client, address, worker_processes, base, (mongo_uri, mongo_database)
        )

    await _all(("before-append", "after-append", "model-committed"), one)


async def test_a_zombie_attempt_racing_its_retry_leaves_one_reply_the_workflow_holds(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """Worker A is frozen (SIGSTOP) just before it commits the first reply; the heartbeat timeout
    hands the call to worker B, whose reply differs; A is thawed and commits first, then B's
    commit meets A's entry under the same stamp: first writer wins, B's attempt returns A's
    reply, and the store and the workflow agree on it."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers), "--steps", "2"]
    common += ["--root", str(root)]
    zombie = worker_processes.start(*common, "--crash", "zombie")
    await wait_for_file(markers / f"ready-{zombie.pid}")
    store = FileStore(root)
    agent = await new(
        AGENT,
        store=store,
        session_id=sid("zombie"),
        executor=executor(temporal_client, q, timeouts=CRASH),
    )
    rid = run_id()
    seen = asyncio.create_task(consume(await agent.run("go", run_id=rid)))

    await wait_for_file(markers / MARKERS["zombie"])  # A holds the complete reply, unwritten
    zombie.send_signal(signal.SIGSTOP)  # no more heartbeats: the server retries elsewhere
    try:
        retry = worker_processes.start(*common, "--crash", "zombie-retry")
        await wait_for_file(markers / MARKERS["zombie-retry"], within=60)  # B's reply, unwritten
        (markers / "go-zombie").write_text("")
    finally:
        zombie.send_signal(signal.SIGCONT)
    outcome = await asyncio.wait_for(seen, 60)
    assert outcome.error is None, repr(outcome.error)
    assert retry.poll() is None  # B resolved the conflict, it did not crash

    stored = await FileStore(root).load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    replies = [m for m in messages_of(stored) if m.role == "assistant"]
    assert len(replies) == 3
    assert replies[0].text().endswith("[zombie]")  # the first writer's reply ...
    assert outcome.messages is not None
    assert outcome.messages[0] == replies[0]  # ... is the one the workflow holds
    assert agent.leaf_id == stored[-1].id
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))


async def test_sigkill_mid_parallel_batch_reruns_only_the_unfinished_call(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """Two parallel calls; the worker dies while the second runs, after the first completed:
    the fresh worker runs only the second again, and both results are committed in one batch,
    in call order."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers), "--steps", "2"]
    common += ["--root", str(root), "--parallel"]
    first = worker_processes.start(*common, "--crash", "parallel")
    await wait_for_file(markers / f"ready-{first.pid}")
    agent = await new(
        AGENT,
        store=FileStore(root),
        session_id=sid("batch"),
        executor=executor(temporal_client, q, timeouts=CRASH),
    )
    rid = run_id()
    seen = asyncio.create_task(consume(await agent.run("go", run_id=rid)))
    handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))

    async def first_call_recorded() -> bool:
        events = json.loads((await handle.fetch_history()).to_json())["events"]
        return _completed(events).count("durable_agent.call_tool") == 1

    await wait_for_file(markers / MARKERS["parallel"])  # call 2 runs ...
    await eventually(first_call_recorded, what="call 1 completed")  # ... call 1 is recorded
    worker_processes.kill(first)
    worker_processes.start(*common)
    outcome = await asyncio.wait_for(seen, 60)
    assert outcome.error is None, repr(outcome.error)

    stored = await FileStore(root).load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    results = [m for m in messages_of(stored) if m.role == "tool_result"]
    assert [m.text() for m in results] == ["step 1 done", "step 2 done"]
    assert side_effects(markers) == (2, 1, 2)  # call 1 ran once, call 2 again after the kill
    history = (await handle.fetch_history()).to_json()
    counts = activity_counts(history)
    # the input (a local activity), then both results in one batch
    assert counts["local:durable_agent.append_entries"] == 2, counts
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))


def _completed(events: list[dict[str, Any]]) -> list[str]:
    """The activity types of the completed activities in a history (JSON events), in order."""
    scheduled = {
        e["eventId"]: e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if "activityTaskScheduledEventAttributes" in e
    }
    return [
        scheduled[e["activityTaskCompletedEventAttributes"]["scheduledEventId"]]
        for e in events
        if "activityTaskCompletedEventAttributes" in e
    ]
