"""A run this server started on Temporal reads its live text only while a stream follows its
session: with no browser it follows its receipts only (its status and end still right), and a
browser that joins mid-reply gets the reply's text from its start, also when an earlier
browser's hub saw part of it and stopped."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent import ScriptedModel
from durable_agent.ai import ModelEvent, ModelRequest, Reply
from durable_agent.server import create_app
from durable_agent.server import hub as hub_module
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session.deltas import Cursor, Delta, DeltaKey
from durable_agent.session.entries import MessageEntry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, live_until_its_entry, lookup, serving, stream
from tests.server.test_stream_order import Reads
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal

TEXT = "Rivers carry the light of the morning down to the sea, slowly and without a sound."


QUIET, LATE, BACK = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("quiet", "late", "back"))
"""Session IDs of their own: the Temporal server (and its visibility) is shared by every test."""


class Paused:
    """Calls ``lookup``, then streams :data:`TEXT` in small pieces and, past its first half,
    waits for ``release`` (``paused`` is set then: the tool's result is stored, some of the
    reply is on the live channel, the rest is not)."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(
            [Reply.call("lookup", {"city": "Paris"}, id="call-1"), Reply(text=TEXT, chunk_size=3)]
        )
        self.paused = asyncio.Event()
        self.release = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in self.inner.stream(request):
            yield event
            if not self.paused.is_set() and len(event.partial.text()) >= len(TEXT) // 2:
                self.paused.set()
                await self.release.wait()


class ChannelReads:
    """Counts the server's reads of its live channel (every read goes through ``read_now``),
    by reply key."""

    def __init__(self, store: FileStore) -> None:
        channel = store.live_deltas()
        inner = channel.read_now
        self.keys: list[DeltaKey] = []

        def read_now(key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
            self.keys.append(key)
            return inner(key, after)

        channel.read_now = read_now  # type: ignore[method-assign]


class Ends:
    """Hears the run listener told a run ended (with or without a stream on the session)."""

    def __init__(self, app: FastAPI) -> None:
        hubs = app.state.server.hubs
        self.tell = hubs.run_status
        self.ended: dict[str, str] = {}
        self._told = asyncio.Event()
        hubs.run_status = self.run_status

    def run_status(
        self, session_id: str, run_id: str, status: str, last: str = "", failure: Any = None
    ) -> None:
        self.tell(session_id, run_id, status, last, failure)
        if status in ("completed", "failed", "cancelled"):
            self.ended[run_id] = status
            self._told.set()

    async def of(self, run_id: str) -> str:
        async with asyncio.timeout(60):
            while run_id not in self.ended:
                self._told.clear()
                await self._told.wait()
        return self.ended[run_id]


async def _half_streamed(client: httpx.AsyncClient, sid: str, model: Paused, reads: Reads) -> str:
    """Start the run; return its ID once half its reply is on the channel and the run's own
    stream (nothing else reads the store) read the session after that: it knows the reply
    streams, and chose whether to read its live text."""
    started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Go"})
    assert started.status_code == 202, started.text
    await asyncio.wait_for(model.paused.wait(), 60)
    await asyncio.wait_for(reads.one_more(), 30)
    run_id: str = started.json()["run_id"]
    return run_id


@dataclass
class Served:
    """A server on a FileStore, a worker with the :class:`Paused` model, and what they count."""

    store: FileStore
    app: FastAPI
    channel: ChannelReads
    reads: Reads
    model: Paused


@contextlib.asynccontextmanager
async def _served(
    temporal: Client, tmp_path: Path
) -> AsyncIterator[tuple[Served, httpx.AsyncClient]]:
    sessions = tmp_path / "sessions"
    store, worker_store = FileStore(sessions), FileStore(sessions)
    queue = f"test-{uuid.uuid4().hex[:12]}"
    app = create_app(store=store, temporal=temporal, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    served = Served(store, app, ChannelReads(store), Reads(store), Paused())
    spec = AgentSpec(model=served.model, tools=[lookup])
    async with (
        running_worker(temporal, worker_store, {"helper": spec}, task_queue=queue),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        yield served, client


def _shown(reader: Reader, run_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The text the run's ``delta`` frames build, and the frames."""
    pieces = [f.data for f in reader.frames if f.event == "delta" and f.data["run_id"] == run_id]
    text = ""
    for piece in pieces:
        text = piece["text"] if piece["restart"] else text + piece["text"]
    return text, pieces


async def test_a_run_nobody_watches_reads_no_live_text(
    temporal_client: Client, tmp_path: Path
) -> None:
    async with _served(temporal_client, tmp_path) as (served, client):
        store, channel, reads, model = served.store, served.channel, served.reads, served.model
        ends = Ends(served.app)
        run_id = await _half_streamed(client, QUIET, model, reads)
        assert channel.keys == [], "no browser watches: no live delta is read"
        model.release.set()
        assert await ends.of(run_id) == "completed"
        status = await client.get(f"/v1/sessions/{QUIET}/runs/{run_id}")
        assert status.json()["status"] == "completed"
    stored = await store.load_entries(QUIET)
    assert [e.message.role for e in stored if isinstance(e, MessageEntry)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert isinstance(stored[-1], MessageEntry) and stored[-1].message.text() == TEXT
    assert channel.keys == [], "no browser watched: no live delta was read"


async def test_a_browser_joining_mid_reply_gets_its_text_from_the_start(
    temporal_client: Client, tmp_path: Path
) -> None:
    async with _served(temporal_client, tmp_path) as (served, client):
        store, channel, reads, model = served.store, served.channel, served.reads, served.model
        run_id = await _half_streamed(client, LATE, model, reads)
        assert channel.keys == [], "nobody watches yet"
        async with stream(client, LATE, after=0) as reader:
            await reader.until(lambda r: _shown(r, run_id)[1], within=30)
            model.release.set()
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == 4)
    stored = await store.load_entries(LATE)
    reply = stored[-1]
    assert isinstance(reply, MessageEntry) and reply.message.text() == TEXT
    pieces = _shown(reader, run_id)[1]
    assert len(pieces[0]["text"]) >= 3 and TEXT.startswith(pieces[0]["text"]), pieces[0]
    live_until_its_entry(reader, reply.id, TEXT, run_id)
    assert {p["entry_parent"] for p in pieces} == {stored[2].id}, "off the tool's result"


async def test_a_browser_back_after_its_hub_stopped_gets_the_text_so_far(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A browser watched the first half of the reply and left; its hub stopped (no linger
    here) and the run's stream stopped reading live text. A browser that comes back gets the
    text shown so far whole, then the rest."""
    monkeypatch.setattr(hub_module, "LINGER", 0.0)
    async with _served(temporal_client, tmp_path) as (served, client):
        reads, model, hubs = served.reads, served.model, served.app.state.server.hubs
        run_id = await _half_streamed(client, BACK, model, reads)
        async with stream(client, BACK, after=0) as first:
            await first.until(lambda r: _shown(r, run_id)[1], within=30)

        async def stopped() -> bool:
            return BACK not in hubs.hubs

        await eventually(stopped, within=30, what="the hub stopped")
        await asyncio.wait_for(reads.one_more(), 30)  # the run's stream saw nobody watches
        async with stream(client, BACK, after=3) as second:
            await second.until(lambda r: _shown(r, run_id)[1], within=30)
            model.release.set()
            await second.until(ended(run_id), within=60)
            await second.until(lambda r: r.last_seq() == 4)
    pieces = _shown(second, run_id)[1]
    seen_before = _shown(first, run_id)[0]  # the run's stream may have read on a moment longer
    assert pieces[0]["restart"] and pieces[0]["text"].startswith(seen_before), pieces[0]
    assert TEXT.startswith(pieces[0]["text"])
    reply = (await served.store.load_entries(BACK))[-1]
    assert isinstance(reply, MessageEntry) and reply.message.text() == TEXT
    live_until_its_entry(second, reply.id, TEXT, run_id)


async def test_deleting_a_session_stops_its_run_on_temporal(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A session deleted mid-reply cancels its run on the workers (it ends with its model still
    paused), and the session created again under its ID at once gets nothing of the old run:
    what the cancelled run goes on to store continues the deleted conversation, which the new
    session does not hold."""
    sid = f"gone-{uuid.uuid4().hex[:8]}"
    async with _served(temporal_client, tmp_path) as (served, client):
        ends = Ends(served.app)
        run_id = await _half_streamed(client, sid, served.model, served.reads)
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
        assert (await client.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        assert await ends.of(run_id) in ("cancelled", "failed")
        assert not served.model.release.is_set()
        assert await served.store.load_entries(sid) == []
