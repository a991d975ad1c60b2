"""The order a session stream tells a run: a run's end only after every entry the run stored,
even when the store's reads fall behind the run, in process and on Temporal, on FileStore and
MongoStore."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.server.runs import TemporalRuns
from durable_agent.session import Entry, Store, StoreUnavailableError
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, scripted, serving, stream
from tests.support.gate_tool import GateTool
from tests.support.temporal import FAST, running_worker


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """A new store object on the test's FileStore root or Mongo database (several objects on
    one place: a worker's and a server's)."""
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    from durable_agent.stores.mongo import MongoStore

    return MongoStore(request.getfixturevalue("mongo_database"))


class ReadSwitch:
    """Takes the server's store down for seq reads (``load_entries_after`` raises
    ``StoreUnavailableError``, as a store does that does not answer in time) while ``down``.
    Installed before the server starts, so its followers read through it."""

    def __init__(self, store: Store) -> None:
        self.inner = store.load_entries_after  # type: ignore[attr-defined]
        self.down = False
        self.failed = 0
        self._failure = asyncio.Event()
        store.load_entries_after = self.read  # type: ignore[attr-defined]

    async def read(self, session_id: str, after: int) -> list[tuple[int, Entry]]:
        if self.down:
            self.failed += 1  # counted as it is called: this read began now
            self._failure.set()
            raise StoreUnavailableError("the store did not answer in time")
        result: list[tuple[int, Entry]] = await self.inner(session_id, after)
        return result

    async def failure_after(self, count: int) -> None:
        """Until a read that began after the ``count``-th failed."""
        while self.failed <= count:
            self._failure.clear()
            await self._failure.wait()


def _told_in_order(reader: Reader, run_id: str, total: int) -> None:
    frames = [(f.event, f.data.get("seq", f.data.get("status"))) for f in reader.frames]
    end = next(
        i
        for i, f in enumerate(reader.frames)
        if f.event == "run" and f.data["run_id"] == run_id and f.data["status"] == "completed"
    )
    last = max(i for i, f in enumerate(reader.frames) if f.event == "entry")
    assert reader.last_seq() == total
    assert last < end, f"the run's end went out before its last entries: {frames}"


@asynccontextmanager
async def _server(
    temporal: Client | None,
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    spec: AgentSpec,
) -> AsyncIterator[tuple[FastAPI, Store]]:
    """The app (runs in process, or on a worker of this test) and the store it reads."""
    store = _store(kind, tmp_path, request)
    worker: AbstractAsyncContextManager[object] = nullcontext()
    if temporal is None:
        app = create_app(store=store, agents={"helper": spec})
    else:
        queue = f"test-{uuid.uuid4().hex[:12]}"
        app = create_app(store=store, temporal=temporal, task_queue=queue, agents=["helper"])
        runs = app.state.server.runs
        assert isinstance(runs, TemporalRuns)
        runs.executor.timeouts = FAST
        own = _store(kind, tmp_path, request)  # the worker's, not taken down
        worker = running_worker(temporal, own, {"helper": spec}, task_queue=queue)
    async with worker:
        yield app, store


class EndHeard:
    """Hears the server's streams being told a run ended (wraps the app's run listener)."""

    def __init__(self, app: FastAPI) -> None:
        hubs = app.state.server.hubs
        self.tell = hubs.run_status
        self.ended: set[str] = set()
        self._told = asyncio.Event()
        hubs.run_status = self.run_status

    def run_status(self, session_id: str, run_id: str, status: str, last: str = "") -> None:
        self.tell(session_id, run_id, status, last)
        if status in ("completed", "failed", "cancelled"):
            self.ended.add(run_id)
            self._told.set()

    async def of(self, run_id: str) -> None:
        while run_id not in self.ended:
            self._told.clear()
            await self._told.wait()


KINDS = ["file", pytest.param("mongo", marks=pytest.mark.mongo)]


async def _reads_fall_behind(
    temporal: Client | None, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The store stops answering the stream's reads just before the run stores its last
    entries and ends; the end is known while every read since has failed. The stream tells the
    end only once a read brought the run's last entry (a client that stops at the end has it)."""
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", {}, id="g1"), Reply(text="All done.")]),
        tools=[gate.tool],
    )
    async with (
        _server(temporal, kind, tmp_path, request, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        switch = ReadSwitch(store)
        heard = EndHeard(app)
        await client.post("/v1/sessions", json={"session_id": "o1"})
        async with stream(client, "o1", after=0) as reader:
            started = await client.post("/v1/sessions/o1/runs", json={"text": "Go"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await gate.started.wait()
            switch.down = True  # the run's result and reply land unread
            gate.release.set()
            await heard.of(run_id)  # the streams know the run ended
            await switch.failure_after(switch.failed)  # a read since the end was known failed
            switch.down = False
            total = len(await store.load_entries("o1"))
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == total)
        _told_in_order(reader, run_id, total)
        stored = [entry_to_wire(e) for e in await store.load_entries("o1")]
        assert reader.entries() == list(enumerate(stored, 1))


@pytest.mark.parametrize("kind", KINDS)
async def test_an_end_waits_for_the_runs_last_entries_in_process(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await _reads_fall_behind(None, kind, tmp_path, request)


@pytest.mark.temporal
@pytest.mark.parametrize("kind", KINDS)
async def test_an_end_waits_for_the_runs_last_entries_on_temporal(
    temporal_client: Client, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await _reads_fall_behind(temporal_client, kind, tmp_path, request)
