"""A message sent into a running run (a steer) is stored just before the model call whose reply
then streams: the stream's ``entry`` frame for it comes before that reply's first ``delta``
frame, as the run's own events order them, in process and on Temporal, even when the hub's
store reads fall behind the run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.ai import Reply
from durable_agent.durable import MAX_QUEUED
from durable_agent.session import Entry, MessageEntry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    HubReadsHeld,
    Reader,
    ended,
    helper_app,
    live_until_its_entry,
    scripted,
    serving,
    stream,
)
from tests.support.gate_tool import GateTool

STEER = "Also check Lisbon."
REPLY = "Paris is sunny and so is Lisbon, a fine day in both cities for a long walk."


class FirstDelta:
    """Set once a run of this process tells the hubs its reply's first live text."""

    def __init__(self, app: FastAPI) -> None:
        hubs = app.state.server.hubs
        self.tell = hubs.run_delta
        self.seen = asyncio.Event()
        hubs.run_delta = self.run_delta

    def run_delta(self, *args: Any) -> None:
        self.tell(*args)
        if args[3]:
            self.seen.set()


@asynccontextmanager
async def _server(
    temporal: Client | None, tmp_path: Path, spec: AgentSpec
) -> AsyncIterator[tuple[FastAPI, FileStore]]:
    store = FileStore(tmp_path / "sessions")
    async with helper_app(temporal, store, spec, lambda: FileStore(tmp_path / "sessions")) as app:
        yield app, store


async def test_a_steer_goes_out_before_the_next_reply_streams(
    temporal: Client | None, tmp_path: Path
) -> None:
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text=REPLY, chunk_size=4, chunk_delay=0.03)]
    spec = AgentSpec(model=scripted(replies), tools=[gate.tool])
    async with (
        _server(temporal, tmp_path, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held, first = HubReadsHeld(store, app), FirstDelta(app)
        # a session of its own: the Temporal server (and its visibility) is shared by every test
        sid = f"steer-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Weather?"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await asyncio.wait_for(gate.started.wait(), 60)
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": STEER})
            assert sent.status_code == 202, sent.text
            held.go.clear()  # the hub reads nothing until the reply streams
            gate.release.set()
            await asyncio.wait_for(first.seen.wait(), 60)
            held.go.set()
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == 5)
        _in_order(reader, await store.load_entries(sid), in_process=temporal is None)


def _in_order(reader: Reader, stored: list[Entry], *, in_process: bool) -> None:
    steer, reply = stored[3], stored[4]
    assert isinstance(steer, MessageEntry)
    assert steer.message.text() == STEER and reply.parent_id == steer.id
    frames = [
        (f.event, f.data.get("entry", {}).get("id") or f.data.get("entry_parent"))
        for f in reader.frames
    ]
    steer_at = frames.index(("entry", steer.id))
    first_delta = next(i for i, f in enumerate(frames) if f[0] == "delta")
    assert steer_at < first_delta, f"the reply's first delta before the steer's entry: {frames}"
    assert frames[first_delta] == ("delta", steer.id)
    shown = live_until_its_entry(reader, reply.id, REPLY)
    assert shown == REPLY or not in_process, "in process, the run's events give it whole"


async def test_a_run_holding_all_it_takes_refuses_the_next_message(
    temporal: Client | None, tmp_path: Path
) -> None:
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text=REPLY)]), tools=[gate.tool]
    )
    async with (
        _server(temporal, tmp_path, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = f"full-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Weather?"})
            run_id = started.json()["run_id"]
            await asyncio.wait_for(gate.started.wait(), 60)
            for i in range(MAX_QUEUED):
                sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": f"m{i}"})
                assert sent.status_code == 202, sent.text
            before = len(await store.load_entries(sid))
            refused = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "one more"})
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["type"] == "RunNotAcceptingError"
            assert len(await store.load_entries(sid)) == before, "a refusal stores nothing"
            gate.release.set()
            await reader.until(ended(run_id), within=60)
        said = [
            e.message.text() for e in await store.load_entries(sid) if isinstance(e, MessageEntry)
        ]
    # every accepted message was delivered, in the order sent, and the refused one never
    assert said[3:] == [f"m{i}" for i in range(MAX_QUEUED)] + [REPLY]
