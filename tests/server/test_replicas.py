"""Two ``durable-agent serve`` processes on one MongoDB store and one Temporal: a run started
through one streams through the other (the server keeps no state a replica needs)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent.session.codec import entry_to_wire
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    ended,
    free_port,
    live_until_its_entry,
    lookup,
    scripted,
    stream,
    tool_script,
)
from tests.support.polling import eventually
from tests.support.temporal import running_worker

pytestmark = [pytest.mark.temporal, pytest.mark.mongo]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def replicas(
    temporal_client: Client, mongo_uri: str, mongo_database: Any, tmp_path: Path
) -> Iterator[tuple[str, list[str]]]:
    """Two serve processes on the test's database; yields (task queue, their URLs)."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "DURABLE_AGENT_MONGODB_DB": mongo_database.name,
        "PYTHONUNBUFFERED": "1",
    }
    address = temporal_client.service_client.config.target_host
    procs, urls = [], []
    for n in range(2):
        port = free_port()
        argv = [sys.executable, "-m", "durable_agent", "serve", "--port", str(port)]
        argv += ["--store", mongo_uri, "--address", address, "--task-queue", queue]
        argv += ["--agent", "helper"]
        log = (tmp_path / f"serve-{n}.log").open("wb")
        procs.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log))
        urls.append(f"http://127.0.0.1:{port}")
    try:
        yield queue, urls
    finally:
        for proc in procs:
            proc.kill()  # by its own PID: the processes this fixture started
            proc.wait()


async def _up(url: str) -> bool:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get("/v1/sessions")).status_code == 200


async def test_start_through_one_replica_stream_through_the_other(
    temporal_client: Client, mongo_database: Any, replicas: tuple[str, list[str]]
) -> None:
    queue, (one, other) = replicas
    store = MongoStore(mongo_database)
    spec = AgentSpec(model=scripted(tool_script()), tools=[lookup])
    for url in (one, other):
        await eventually(functools.partial(_up, url), within=30, what=f"{url} serving")
    async with (
        running_worker(temporal_client, store, {"helper": spec}, task_queue=queue),
        httpx.AsyncClient(base_url=one) as first,
        httpx.AsyncClient(base_url=other) as second,
    ):
        assert (await second.post("/v1/sessions", json={"session_id": "r1"})).status_code == 201
        async with stream(second, "r1", after=0) as reader:
            started = await first.post("/v1/sessions/r1/runs", json={"text": "Weather?"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await reader.until(ended(run_id), within=60)
        stored = [entry_to_wire(e) for e in await store.load_entries("r1")]
        assert reader.entries() == list(enumerate(stored, 1))
        reply = stored[-1]
        live_until_its_entry(reader, reply["id"], reply["message"]["content"][0]["text"])
        # the other replica sees the run too (a busy check across processes)
        status = await second.get(f"/v1/sessions/r1/runs/{run_id}")
        assert status.json()["status"] == "completed"
