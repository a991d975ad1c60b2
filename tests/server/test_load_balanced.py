"""A front-end behind a load balancer: two server processes (each its own store object and
Temporal client) on one MongoDB and one Temporal, each request going to either. A stream that
drops mid-reply and resumes through the other server shows the reply's text once; a stream
live on one server tells the end of a run started through the other, however short."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pymongo import AsyncMongoClient
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent import ScriptedModel
from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import MessageEntry
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    Reader,
    ended,
    live_until_its_entry,
    lookup,
    scripted,
    serving,
    stream,
)
from tests.server.test_unwatched_runs import TEXT, Paused
from tests.support.gated_store import GatedStore, has_role
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

pytestmark = [pytest.mark.temporal, pytest.mark.mongo]


@asynccontextmanager
async def _replicas(
    temporal: Client,
    mongo_uri: str,
    database: Any,
    spec: AgentSpec,
    worker_store: Callable[[MongoStore], Any] = lambda store: store,
    runs: list[TemporalRuns] | None = None,
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two served apps and a worker, each with a MongoDB client and store object of its own,
    the servers each with a Temporal client of its own; a client of each server.
    ``worker_store``: the store the worker writes through (its live deltas go to the MongoDB
    store's channel all the same); ``runs`` gets each server's runs."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    mongos: list[AsyncMongoClient[dict[str, Any]]] = [AsyncMongoClient(mongo_uri) for _ in range(3)]
    apps = []
    for mongo in mongos[:2]:
        own = await Client.connect(
            temporal.service_client.config.target_host, data_converter=pydantic_data_converter
        )
        store = MongoStore(mongo[database.name])
        app = create_app(store=store, temporal=own, task_queue=queue, agents=["helper"])
        served = app.state.server.runs
        assert isinstance(served, TemporalRuns)
        served.executor.timeouts = FAST
        if runs is not None:
            runs.append(served)
        apps.append(app)
    store = MongoStore(mongos[2][database.name])
    try:
        async with (
            running_worker(
                temporal,
                worker_store(store),
                {"helper": spec},
                task_queue=queue,
                live_deltas=store.live_deltas(),
            ),
            serving(apps[0]) as url_a,
            serving(apps[1]) as url_b,
            httpx.AsyncClient(base_url=url_a) as a,
            httpx.AsyncClient(base_url=url_b) as b,
        ):
            yield [a, b]
    finally:
        for mongo in mongos:
            await mongo.close()


class Shown:
    """The live text a front-end shows, kept across a reconnect as the chat page keeps it: a
    ``delta`` appends to the text of its reply unless it says ``restart``."""

    def __init__(self) -> None:
        self.parent: str | None = None
        self.text = ""
        self.seen: list[str] = []

    def take(self, reader: Reader, run_id: str) -> None:
        for frame in reader.frames:
            data = frame.data
            if frame.event != "delta" or data["run_id"] != run_id:
                continue
            same = not data["restart"] and data["entry_parent"] == self.parent
            self.text = (self.text if same else "") + data["text"]
            self.parent = data["entry_parent"]
            self.seen.append(self.text)


@pytest.mark.parametrize("starter", [0, 1], ids=["started-where-first-streamed", "elsewhere"])
async def test_a_stream_resumed_through_the_other_server_shows_the_reply_once(
    temporal_client: Client, mongo_uri: str, mongo_database: Any, starter: int
) -> None:
    model = Paused()
    spec = AgentSpec(model=model, tools=[lookup])
    sid = f"lb-{uuid.uuid4().hex[:8]}"
    async with _replicas(temporal_client, mongo_uri, mongo_database, spec) as (a, b):
        assert (await b.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        shown = Shown()
        async with stream(a, sid, after=0) as first:
            started = await (a, b)[starter].post(f"/v1/sessions/{sid}/runs", json={"text": "Go"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await asyncio.wait_for(model.paused.wait(), 60)
            await first.until(lambda r: any(f.event == "delta" for f in r.frames), within=30)
        shown.take(first, run_id)
        assert shown.text and TEXT.startswith(shown.text)
        async with stream(b, sid, last_event_id=first.last_seq()) as second:
            await second.until(lambda r: any(f.event == "delta" for f in r.frames), within=30)
            model.release.set()
            await second.until(ended(run_id), within=60)
        shown.take(second, run_id)
        reply = (await MongoStore(mongo_database).load_entries(sid))[-1]
    assert all(TEXT.startswith(text) for text in shown.seen), shown.seen
    live_until_its_entry(second, reply.id, TEXT, run_id)


async def test_a_stream_tells_the_end_of_a_short_run_started_through_the_other_server(
    temporal_client: Client, mongo_uri: str, mongo_database: Any
) -> None:
    """The chat page, its stream live on A, starts a run through B: it waits for the run's end
    on the stream (it asks for the status only of a run started before its stream was live).
    A run over before Temporal lists it as running still ends on A's stream, after its
    entries."""
    spec = AgentSpec(model=scripted([Reply(text=t) for t in ("Hello.", "Again.", "Once more.")]))
    sid = f"lb-{uuid.uuid4().hex[:8]}"
    async with _replicas(temporal_client, mongo_uri, mongo_database, spec) as (a, b):
        assert (await a.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        async with stream(a, sid, after=0) as reader:
            await reader.until(lambda r: r.live)
            for number, via in enumerate((b, a, b), 1):
                started = await via.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
                assert started.status_code == 202, started.text
                run_id = started.json()["run_id"]
                await reader.until(ended(run_id), within=30)
                said = [(f.event, f.data.get("status")) for f in reader.frames]
                assert said[-1] == ("run", "completed"), said
                assert [f.data["seq"] for f in reader.frames if f.event == "entry"] == list(
                    range(1, 2 * number + 1)
                ), "the run's entries come before its end"


@pytest.mark.parametrize("calls", [1, 2], ids=["one-call", "two-calls"])
@pytest.mark.parametrize("starter", [0, 1], ids=["started-here", "started-elsewhere"])
async def test_a_reply_streams_under_its_parent_though_the_run_answered_an_older_leaf(
    temporal_client: Client, mongo_uri: str, mongo_database: Any, starter: int, calls: int
) -> None:
    """The tool result is stored but its commit has not returned to the run (a slow write)
    when a stream on A starts following the run: the run's ``state()`` still names the call as
    its leaf, the store holds the result after it. Every ``delta`` of the reply names the
    result, its real parent, so the chat page (which shows the live text hanging off its
    leaf, by parent) shows the reply's text from its first characters, whichever server
    started the run; with a second call, its reply (no text) counts as the run's too, so the
    text of the reply after it streams."""
    model = Paused()
    model.inner = ScriptedModel(
        [Reply.call("lookup", {"city": city}, id=city) for city in ("Paris", "Rome")[:calls]]
        + [Reply(text=TEXT, chunk_size=3)]
    )
    spec = AgentSpec(model=model, tools=[lookup])
    sid = f"lb-{uuid.uuid4().hex[:8]}"
    gated: list[GatedStore] = []

    def gate(store: MongoStore) -> GatedStore:
        gated.append(GatedStore(store))
        gated[0].arm(has_role("tool_result"))
        return gated[0]

    runs: list[TemporalRuns] = []
    replicas = _replicas(temporal_client, mongo_uri, mongo_database, spec, gate, runs)
    async with replicas as (a, b):
        assert (await a.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        started = await (a, b)[starter].post(f"/v1/sessions/{sid}/runs", json={"text": "Go"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        await asyncio.wait_for(gated[0].entered.wait(), 60)  # stored, not returned to the run

        async def listed() -> bool:  # so the stream's hub finds it at its start
            return run_id in await runs[0].active(sid)

        await eventually(listed, within=30, what="the run listed running")
        async with stream(a, sid, after=0) as reader:
            await reader.until(lambda r: any(f.event == "run" for f in r.frames), within=30)
            await gated[0].let_go()
            await asyncio.wait_for(model.paused.wait(), 60)
            await reader.until(lambda r: any(f.event == "delta" for f in r.frames), within=30)
            model.release.set()
            await reader.until(ended(run_id), within=60)
    reply = [f.data["entry"] for f in reader.frames if f.event == "entry"][-1]
    assert reply["message"]["role"] == "assistant"
    parents = [f.data["entry_parent"] for f in reader.frames if f.event == "delta"]
    assert parents and set(parents) == {reply["parent_id"]}, (parents, reply["parent_id"])
    # as the chat page keeps it: live text by parent, shown while it hangs off the leaf
    live: dict[str, str] = {}
    leaf, shown = "", []
    for frame in reader.frames:
        if frame.event == "delta":
            data = frame.data
            parent = data["entry_parent"]
            live[parent] = ("" if data["restart"] else live.get(parent, "")) + data["text"]
            if parent == leaf:
                shown.append(live[parent])
        elif frame.event == "entry":
            leaf = frame.data["entry"]["id"]
    assert shown and all(TEXT.startswith(text) for text in shown), shown
    live_until_its_entry(reader, reply["id"], TEXT, run_id)
    assert MessageEntry.model_validate(reply).message.text() == TEXT


async def test_a_reply_stored_before_the_hub_started_counts_though_the_run_answered_before_it(
    temporal_client: Client, mongo_uri: str, mongo_database: Any
) -> None:
    """The run's first reply (a tool call) is stored but its commit has not returned to the
    run when a stream on A starts following the run from seq 0: the stream replays the reply,
    the hub starts reading after it, and the run's ``state()`` does not count it yet. The
    reply after the tool's result streams all the same: its text shows live, under its
    parent, before its entry."""
    model = Paused()
    spec = AgentSpec(model=model, tools=[lookup])
    sid = f"lb-{uuid.uuid4().hex[:8]}"
    gated: list[GatedStore] = []

    def gate(store: MongoStore) -> GatedStore:
        gated.append(GatedStore(store))
        gated[0].arm(has_role("assistant"))
        return gated[0]

    runs: list[TemporalRuns] = []
    replicas = _replicas(temporal_client, mongo_uri, mongo_database, spec, gate, runs)
    async with replicas as (a, b):
        assert (await a.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        started = await b.post(f"/v1/sessions/{sid}/runs", json={"text": "Go"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        await asyncio.wait_for(gated[0].entered.wait(), 60)  # stored, not returned to the run

        async def listed() -> bool:  # so the stream's hub finds it at its start
            return run_id in await runs[0].active(sid)

        await eventually(listed, within=30, what="the run listed running")
        async with stream(a, sid, after=0) as reader:
            await reader.until(lambda r: r.live and any(f.event == "run" for f in r.frames))
            replayed = reader.last_seq()  # the question and the reply, before the hub's start
            await gated[0].let_go()
            await asyncio.wait_for(model.paused.wait(), 60)
            await reader.until(lambda r: any(f.event == "delta" for f in r.frames), within=30)
            model.release.set()
            await reader.until(ended(run_id), within=60)
    assert replayed == 2
    reply = [f.data["entry"] for f in reader.frames if f.event == "entry"][-1]
    assert MessageEntry.model_validate(reply).message.text() == TEXT
    receipt = next(
        i for i, f in enumerate(reader.frames) if f.event == "entry" and f.data["entry"] == reply
    )
    pieces = [f.data for f in reader.frames[:receipt] if f.event == "delta"]
    assert pieces and {p["entry_parent"] for p in pieces} == {reply["parent_id"]}, pieces
    assert not [f for f in reader.frames[receipt:] if f.event == "delta"]
