"""The load benchmark's measurements: Mongo ops counted in every store client, the
activity wait to start measured on the worker, and a time budget the audit understands.

One ``durable-agent worker`` process (the CLI, serving the load app) and 3 sessions x 3 turns:
every model and tool attempt notes its wait, and every store command of the worker and of this
process is counted by a PyMongo ``CommandListener``; on FerretDB the total is exactly what the
server reports (it has no ``serverStatus.opcounters``, only per-command totals)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from durable_agent.stores import MemoryStore
from durable_agent.stores.mongo import MongoStore
from tests.support.load import LoadDriver, WorkerFleet, audit
from tests.support.worker_stats import DATA_COMMANDS, OpCounter, stats_after
from tests.temporal.helpers import CRASH

pytestmark = [pytest.mark.temporal, pytest.mark.mongo]


def _server_data_commands(uri: str) -> int | None:
    """FerretDB's own count of data commands served (``None`` on MongoDB, whose opcounters
    count differently)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    with client:
        status = client.admin.command("serverStatus")
    if "opcounters" in status:
        return None
    commands = status.get("metrics", {}).get("commands", {})
    return sum(
        int(v.get("total", 0))
        for k, v in commands.items()
        if k.lower() in DATA_COMMANDS and isinstance(v, dict)
    )


async def _history_activity_waits(client: Client, workflow_ids: list[str]) -> list[float]:
    waits = []
    for wid in workflow_ids:
        scheduled: dict[int, float] = {}
        async for event in client.get_workflow_handle(wid).fetch_history_events():
            t = event.event_time.ToDatetime().timestamp()
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = t
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                waits.append(
                    t - scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
                )
    return waits


async def test_ops_and_activity_waits_are_measured_in_the_processes(
    temporal_client: Client, address: str, mongo_uri: str, tmp_path: Path
) -> None:
    name = f"da_meas_{uuid.uuid4().hex[:8]}"
    head, _, query = mongo_uri.partition("?")
    uri = f"{head.rstrip('/')}/{name}" + (f"?{query}" if query else "")
    queue = f"meas-{uuid.uuid4().hex[:10]}"
    fleet = WorkerFleet(address, uri, queue, tmp_path, latency=0.05)
    own = OpCounter()
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(uri, event_listeners=[own])
    try:
        await fleet.start()
        server0 = _server_data_commands(mongo_uri)
        ops0 = own.count + (await stats_after(fleet.stats_path(0), time.time()))["ops"]
        store = MongoStore(mongo[name])
        driver = LoadDriver(temporal_client, store, queue, 3, 3, CRASH, run_timeout=60)
        await asyncio.wait_for(driver.run(), 120)
        verdict = await audit(store, driver)
        server1 = _server_data_commands(mongo_uri)
        stats = await stats_after(fleet.stats_path(0), time.time())
        ops1 = own.count + stats["ops"]
        history = await _history_activity_waits(
            temporal_client, [r.workflow_id for r in driver.records]
        )
    finally:
        fleet.stop_all()
        await mongo.drop_database(name)
        await mongo.close()

    assert verdict.clean and verdict.runs == 9, verdict.problems
    # every tool attempt and model attempt noted how long it waited after being scheduled
    waits = stats["activity_waits"]
    assert len(waits["tool"]) == 3 and len(waits["model"]) == 12
    assert all(0 <= w < 30 for w in waits["tool"] + waits["model"])
    # the history's started stamps cannot show that wait: eager dispatch reads (almost) 0
    assert history and min(history) < 0.001
    # the worker's and this process's store commands, counted in the clients
    assert stats["ops"] > 0 and own.count > 0
    if server0 is not None and server1 is not None:
        # the audit's loads and the counting itself are data commands the server also saw
        assert ops1 - ops0 == server1 - server0


async def test_a_budget_stops_new_turns_and_the_audit_expects_only_those(
    temporal_client: Client, address: str, mongo_uri: str, tmp_path: Path
) -> None:
    name = f"da_budget_{uuid.uuid4().hex[:8]}"
    head, _, query = mongo_uri.partition("?")
    uri = f"{head.rstrip('/')}/{name}" + (f"?{query}" if query else "")
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(uri)
    try:
        store = MongoStore(mongo[name])
        # no worker needed: a spent budget starts no turn at all
        driver = LoadDriver(temporal_client, store, "nobody", 4, 3, CRASH, budget=0.0)
        await asyncio.wait_for(driver.run(), 60)
        verdict = await audit(store, driver)
    finally:
        await mongo.drop_database(name)
        await mongo.close()
    assert driver.records == [] and driver.planned == 12
    assert verdict.runs == 0 and verdict.clean and verdict.complete


async def test_runs_in_flight_at_the_cut_are_unfinished_not_lost(temporal_client: Client) -> None:
    # no worker polls the queue: every first turn is still running on the server at the cut
    driver = LoadDriver(
        temporal_client,
        MemoryStore(),
        f"nobody-{uuid.uuid4().hex[:8]}",
        2,
        3,
        CRASH,
        budget=0.5,
        cut=1.0,
    )
    await asyncio.wait_for(driver.run(), 60)
    assert [r.turn for r in driver.records] == [1, 1]
    await driver.stop_unfinished()
    verdict = await audit(driver.store, driver)
    assert (verdict.runs, verdict.waits_returned, verdict.unfinished) == (2, 0, 2)
    assert verdict.statuses == {"RUNNING": 2}  # as the server had them at the cut
    assert (verdict.lost, verdict.failed, verdict.duplicated) == (0, 0, 0), verdict.problems
    assert verdict.clean and not verdict.complete
    for record in driver.records:  # and the bench left nothing running
        described = await temporal_client.get_workflow_handle(record.workflow_id).describe()
        assert described.status == WorkflowExecutionStatus.TERMINATED


async def test_a_failed_run_is_counted_failed_and_the_turns_after_it_are_not_due(
    temporal_client: Client,
) -> None:
    # no worker: the server times the run out (its execution timeout), wait() raises
    driver = LoadDriver(
        temporal_client,
        MemoryStore(),
        f"nobody-{uuid.uuid4().hex[:8]}",
        1,
        3,
        CRASH,
        run_timeout=1.0,
    )
    await asyncio.wait_for(driver.run(), 60)
    verdict = await audit(driver.store, driver)
    assert [(r.turn, r.status) for r in driver.records] == [(1, "TIMED_OUT")]
    assert driver.records[0].error is not None
    assert (verdict.runs, verdict.waits_returned, verdict.failed) == (1, 0, 1)
    assert (verdict.lost, verdict.unfinished) == (0, 0), verdict.problems  # turns 2-3 never asked
    assert not verdict.clean
