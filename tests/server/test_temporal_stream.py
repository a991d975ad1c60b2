"""Runs on Temporal through the HTTP API: the stream follows the store, any replica serves it."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    ended,
    live_until_its_entry,
    lookup,
    scripted,
    serving,
    stream,
    tool_script,
)
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal


def _app(client: Client, store: FileStore, queue: str, *, can: int | None = None) -> FastAPI:
    app = create_app(store=store, temporal=client, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    runs.executor.continue_as_new_after_turns = can
    return app


async def _hopping(
    client: httpx.AsyncClient, session_id: str, total: int, last: int = 0
) -> list[object]:
    """Entries after ``last`` of a client reconnecting after each entry frame it gets."""
    got: list[object] = []
    while last < total:
        async with stream(client, session_id, last_event_id=last) as reader:
            await reader.until(lambda r: r.entries(), within=60)
        frames = reader.entries()
        got += frames
        last = frames[-1][0]
    return got


async def test_a_run_resumes_at_every_position_while_it_goes(
    temporal_client: Client, tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    spec = AgentSpec(model=scripted(tool_script() * 2), tools=[lookup])
    app = _app(temporal_client, store, queue, can=1)
    async with (
        running_worker(temporal_client, store, {"helper": spec}, task_queue=queue),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "t2"})
        first = await client.post("/v1/sessions/t2/runs", json={"text": "Weather?"})
        got = await _hopping(client, "t2", 4)
        async with stream(client, "t2") as reader:
            status = await client.get(f"/v1/sessions/t2/runs/{first.json()['run_id']}")
            if status.json()["status"] == "started":
                await reader.until(ended(first.json()["run_id"]), within=30)
        started = await client.post("/v1/sessions/t2/runs", json={"text": "Again?"})
        assert started.status_code == 202, started.text
        got += await _hopping(client, "t2", 8, last=4)
        stored = [entry_to_wire(e) for e in await store.load_entries("t2")]
        assert got == list(enumerate(stored, 1))


@pytest.mark.parametrize("can", [None, 1], ids=["one-run", "continue-as-new"])
async def test_a_temporal_run_streams_and_resumes_at_every_seq(
    temporal_client: Client, tmp_path: Path, can: int | None
) -> None:
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    spec = AgentSpec(model=scripted(tool_script()), tools=[lookup])
    app = _app(temporal_client, store, queue, can=can)
    async with (
        running_worker(temporal_client, store, {"helper": spec}, task_queue=queue),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        started = await client.post("/v1/sessions/t1/runs", json={"text": "Weather?"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        async with stream(client, "t1", after=0) as reader:
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == 4)
        stored = [entry_to_wire(e) for e in await store.load_entries("t1")]
        assert reader.entries() == list(enumerate(stored, 1))
        for piece in (f.data for f in reader.frames if f.event == "delta"):
            assert piece["entry_parent"] == stored[2]["id"]
        reply = stored[3]
        live_until_its_entry(reader, reply["id"], reply["message"]["content"][0]["text"])
        statuses = [f.data["status"] for f in reader.frames if f.event == "run"]
        assert statuses[-1] == "completed"
        # a client that drops after every entry and comes back with its Last-Event-ID
        got = await _hopping(client, "t1", len(stored))
        assert got == list(enumerate(stored, 1))
        # the run ended: a client coming back now replays from the store, from any seq
        for n in range(len(stored) + 1):
            async with stream(client, "t1", last_event_id=n) as again:
                await again.until(lambda r, n=n: n == 4 or r.last_seq() == 4)
            assert again.entries() == list(enumerate(stored, 1))[n:]
