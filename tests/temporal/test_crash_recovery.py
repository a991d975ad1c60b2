"""Crash recovery: the worker is a subprocess, SIGKILLed at four points of a run; a fresh worker
finishes the run and the store holds every message exactly once, chained, with every receipt the
client saw naming a stored entry (SPEC §7.2, §7.5; issue 4 item 5).

The four kill points run concurrently (each with its own task queue, session and worker
processes): most of a recovery is waiting for timeouts, so this keeps the suite short.
"""

from __future__ import annotations

import asyncio
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
from tests.support.worker_process import AGENT, CRASH_POINTS, MARKERS
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    CRASH,
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_for_file,
)

pytestmark = pytest.mark.temporal

RECOVERY_BUDGET = 20.0
"""Seconds from SIGKILL to the run's end (heartbeat 2 s + sticky 1 s + a worker start, loaded)."""


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
    killed_at = time.monotonic()
    procs.start(*common)

    outcome = await asyncio.wait_for(seen, 60)
    recovery = time.monotonic() - killed_at
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
    """FileStore: (a) mid model stream, (b) model done but its append not started, (c) mid
    tool, (d) an append written but not reported."""

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
    """MongoStore, the two points that test its idempotent appends: (b) and (d)."""

    async def one(point: str) -> float:
        base = tmp_path / point
        base.mkdir()
        return await crash_and_recover(
            point, temporal_client, address, worker_processes, base, (mongo_uri, mongo_database)
        )

    await _all(("before-append", "after-append"), one)
