"""A worker SIGKILLed under load: 10 sessions x 3 turns on two worker processes,
one killed while it has an activity running (seen on the server), a replacement joining after the
survivor returned more runs; the store holds every turn once and every wait() returned."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from temporalio.client import Client

from durable_agent.stores.mongo import MongoStore
from tests.support.load import (
    LoadDriver,
    WorkerFleet,
    audit,
    victim_running_activity,
    worker_identity,
)
from tests.temporal.helpers import CRASH

pytestmark = [pytest.mark.temporal, pytest.mark.mongo]


async def test_sigkill_one_of_two_workers_under_load(
    temporal_client: Client, address: str, mongo_uri: str, tmp_path: Path
) -> None:
    name = f"da_kill_{uuid.uuid4().hex[:8]}"
    head, _, query = mongo_uri.partition("?")
    uri = f"{head.rstrip('/')}/{name}" + (f"?{query}" if query else "")
    queue = f"kill-{uuid.uuid4().hex[:10]}"
    fleet = WorkerFleet(address, uri, queue, tmp_path, latency=0.2)
    mongo: AsyncMongoClient[Any] = AsyncMongoClient(uri)
    try:
        await asyncio.gather(fleet.start(), fleet.start())
        store = MongoStore(mongo[name])
        driver = LoadDriver(temporal_client, store, queue, 10, 3, CRASH, run_timeout=120)
        load = asyncio.create_task(driver.run())
        victim = fleet.procs[0]
        await victim_running_activity(temporal_client, driver, worker_identity(victim.pid))
        at_kill = driver.completed()
        fleet.kill(victim)
        await driver.wait_completed(at_kill + 1, within=120)  # the survivor carries on alone
        await fleet.start()
        await asyncio.wait_for(load, 180)
        verdict = await audit(store, driver)
    finally:
        fleet.stop_all()
        await mongo.drop_database(name)
        await mongo.close()
    assert verdict.runs == 30
    assert verdict.waits_returned == 30, verdict.problems
    assert (verdict.lost, verdict.duplicated) == (0, 0), verdict.problems
    assert verdict.misanswered == 0 and verdict.tool_calls == 10, verdict.problems
    assert verdict.off_chain == 0 and verdict.unexpected == 0, verdict.problems
