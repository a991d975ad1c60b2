"""Runs in process, streamed over a real HTTP server: receipts, live text, resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from durable_agent.server import create_app
from durable_agent.server.hubs import Hubs
from durable_agent.session import MessageEntry
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, lookup, scripted, serving, stream, tool_script
from tests.server.test_unwatched_runs import Ends, Paused


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "sessions")


async def test_a_run_streams_its_receipts_and_live_text(store: FileStore) -> None:
    spec = AgentSpec(model=scripted(tool_script()), tools=[lookup])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post("/v1/sessions", json={"session_id": "s1"})
        assert created.status_code == 201
        assert created.json()["last_seq"] == 0
        async with stream(client, "s1", after=0) as reader:
            started = await client.post("/v1/sessions/s1/runs", json={"text": "Weather?"})
            assert started.status_code == 202
            run_id = started.json()["run_id"]
            await reader.until(ended(run_id))
            await reader.until(lambda r: r.last_seq() == 4)
        stored = await store.load_entries("s1")
        assert reader.entries() == [(i, entry_to_wire(e)) for i, e in enumerate(stored, 1)]
        pieces = [f.data for f in reader.frames if f.event == "delta"]
        assert len(pieces) > 1, "the reply's text came in pieces before its receipt"
        reply = stored[-1]
        assert isinstance(reply, MessageEntry)
        assert "".join(p["text"] for p in pieces) == reply.message.text()
        assert {p["entry_parent"] for p in pieces} == {stored[-2].id}
        receipt = next(i for i, f in enumerate(reader.frames) if f.data.get("seq") == 4)
        last_piece = max(i for i, f in enumerate(reader.frames) if f.event == "delta")
        assert last_piece < receipt
        statuses = [f.data["status"] for f in reader.frames if f.event == "run"]
        assert statuses == ["started", "completed"]
        got = await client.get("/v1/sessions/s1")
        assert got.json()["last_seq"] == 4 and got.json()["leaf_id"] == stored[-1].id


async def test_resume_after_every_seq_gives_each_entry_once(store: FileStore) -> None:
    spec = AgentSpec(model=scripted(tool_script()), tools=[lookup])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        run = await client.post("/v1/sessions/s2/runs", json={"text": "Weather?"})
        run_id = run.json()["run_id"]
        async with stream(client, "s2", after=0) as reader:
            await reader.until(lambda r: r.last_seq() == 4)
        stored = [entry_to_wire(e) for e in await store.load_entries("s2")]
        for n in range(len(stored) + 1):
            async with stream(client, "s2", last_event_id=n) as again:
                await again.until(lambda r, n=n: r.last_seq() == 4 or n == 4)
                # the query parameter loses to the header
            assert again.entries() == list(enumerate(stored, 1))[n:]
        status = await client.get(f"/v1/sessions/s2/runs/{run_id}")
        assert status.json() == {"run_id": run_id, "status": "completed"}


async def test_keepalive_deleted_and_a_dropped_client_cancels_nothing(store: FileStore) -> None:
    slow = tool_script("A slow answer " * 10)
    spec = AgentSpec(model=scripted(slow), tools=[lookup])
    app = create_app(store=store, agents={"helper": spec}, keepalive=1)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "s3"})
        async with stream(client, "s3", after=0) as reader:
            run = await client.post("/v1/sessions/s3/runs", json={"text": "Weather?"})
            assert run.status_code == 202
            await reader.until(lambda r: any(f.event == "delta" for f in r.frames))
        # the only client went mid-reply: the run goes on and completes
        async with stream(client, "s3", after=0) as again:
            await again.until(lambda r: r.last_seq() == 4)
            await again.until(lambda r: r.comments >= 1, within=5)  # a keep-alive comment
            assert (await client.delete("/v1/sessions/s3")).status_code == 204
            await again.until(lambda r: any(f.event == "deleted" for f in r.frames))
        assert [f.event for f in again.frames][-1] == "deleted"
        assert (await client.get("/v1/sessions/s3")).status_code == 404
        assert (await client.get("/v1/sessions/s3/stream")).status_code == 404


async def test_deleting_a_session_stops_its_runs_and_nothing_of_them_comes_back(
    store: FileStore,
) -> None:
    """The server keeps a streaming reply's text so far for browsers that join mid-reply. A
    session deleted mid-reply stops its run (cancelled, not calling the model on until its next
    commit fails), and a session created again under its ID shows none of the old run: neither
    its text nor its status, and takes a run at once."""
    model = Paused()
    spec = AgentSpec(model=model, tools=[lookup])
    app = create_app(store=store, agents={"helper": spec}, keepalive=0.2)
    ends = Ends(app)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "s4"})
        async with stream(client, "s4", after=0) as reader:
            started = await client.post("/v1/sessions/s4/runs", json={"text": "Tell me"})
            run_id = started.json()["run_id"]
            await reader.until(lambda r: any(f.event == "delta" for f in r.frames))
            await asyncio.wait_for(model.paused.wait(), 20)
            assert (await client.delete("/v1/sessions/s4")).status_code == 204
            await reader.until(lambda r: any(f.event == "deleted" for f in r.frames))
        # it ends with its model still paused: the delete stopped it (its cancel's own commit
        # finds the session gone)
        assert await ends.of(run_id) in ("cancelled", "failed")
        await client.post("/v1/sessions", json={"session_id": "s4"})
        async with stream(client, "s4", after=0) as again:
            await again.until(lambda r: r.live)  # what a join sends came before
            assert [f.event for f in again.frames] == []
            model.release.set()
            # the old run's ID names nothing in the new session (it ended after the delete)
            gone = await client.get(f"/v1/sessions/s4/runs/{run_id}")
            assert gone.status_code == 404, gone.text
            again_start = {"text": "Again", "run_id": run_id}
            second = await client.post("/v1/sessions/s4/runs", json=again_start)
            assert second.status_code == 202, second.text
            await again.until(ended(second.json()["run_id"]))
        assert {f.data.get("run_id") for f in again.frames if f.event == "run"} == {run_id}
        said = [e.message for e in await store.load_entries("s4") if isinstance(e, MessageEntry)]
        assert said[0].text() == "Again"  # a new run took it


async def test_a_deleted_sessions_run_that_streams_on_shows_nothing(store: FileStore) -> None:
    """A run whose cancel has not reached it yet (on Temporal, a moment) streams on after its
    session was deleted: the server keeps none of its text and shows none of it, nor its status
    or end, to a session created again under the ID."""
    hubs = Hubs(store, None)
    hubs.run_status("s5", "r1", "started")
    hubs.run_delta("s5", "r1", "", "Rivers ", False)
    assert hubs.deleted("s5") == ["r1"]
    hubs.run_delta("s5", "r1", "", "carry", False)
    hubs.run_status("s5", "r1", "awaiting_approval")
    await store.create_session("s5")
    hub = await hubs.hub("s5", 0)
    hubs.run_delta("s5", "r1", "", " the light", False)
    assert (hubs.shown, hub.partial, hub.active) == ({}, {}, {})
    hubs.run_status("s5", "r1", "failed")
    assert (hub.active, hubs.dropped, hubs.going) == ({}, set(), {})
    await hubs.aclose()
