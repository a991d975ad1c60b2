"""What a server keeps does not grow with what it served: a session's hub, once gone, leaves
no task behind, nor does a server stopped under its runs, and the runs and streams that ended
leave nothing keyed by their session."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent.ai import Reply
from durable_agent.ai.messages import user_message
from durable_agent.server import create_app
from durable_agent.server import hub as hub_module
from durable_agent.server.hub import Frame
from durable_agent.server.local_runs import LocalRuns
from durable_agent.session.entries import MessageEntry
from durable_agent.session.errors import SessionNotFoundError
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, helper_app, scripted, serving, stream
from tests.server.test_stream_status import _on_temporal
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually


def _outcome_polls() -> int:
    """Tasks of this loop waiting for a run's end (``TemporalRuns.outcome``'s long poll)."""
    return sum(
        1
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "TemporalRuns.outcome"
    )


@pytest.mark.temporal
async def test_a_hub_gone_stops_watching_the_run_another_replica_started(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each browser that opens a session whose run another replica started (here: waiting
    for a decision, which may take days) starts a hub that long-polls the run's end. Once
    the browser left and the hub stopped, that poll stops too: reloads do not pile them up."""
    monkeypatch.setattr(hub_module, "LINGER", 0.0)
    sid = f"reloaded-{uuid.uuid4().hex[:8]}"  # the Temporal server is every test's
    async with _on_temporal(temporal_client, tmp_path) as (starter, watcher):
        hubs = watcher.state.server.hubs
        async with (
            serving(starter) as at,
            serving(watcher) as url,
            httpx.AsyncClient(base_url=at) as starting,
            httpx.AsyncClient(base_url=url) as client,
        ):
            started = await starting.post(f"/v1/sessions/{sid}/runs", json={"text": "Mail them"})
            run_id = started.json()["run_id"]

            async def waiting() -> bool:
                got = await client.get(f"/v1/sessions/{sid}/runs/{run_id}")
                return bool(got.json()["status"] == "awaiting_approval")

            await eventually(waiting, within=60, what="the run waiting for a decision")
            for _ in range(3):
                async with stream(client, sid) as reader:
                    await reader.until(lambda r: r.frames)
                    assert reader.frames[0].data["status"] == "awaiting_approval"
                    assert _outcome_polls() == 1

                async def stopped() -> bool:
                    return sid not in hubs.hubs

                await eventually(stopped, within=30, what="the hub stopped")
                assert _outcome_polls() == 0, "the gone hub's poll of the run's end goes on"
            cancelled = await starting.post(f"/v1/sessions/{sid}/runs/{run_id}/cancel")
            assert cancelled.status_code == 202


SERVER_SIDE = (
    "durable_agent.server.",
    "durable_agent.durable.stream",
    "durable_agent.workflows.run_stream",
)
"""The modules of the tasks a server starts (its hubs, its relays, the streams of its runs), not
those of its worker's."""


def _pending_since(before: set[asyncio.Task[object]]) -> list[str]:
    """The server-side tasks started since ``before`` that have not ended, by coroutine."""
    left = []
    for task in asyncio.all_tasks() - before:
        frame = getattr(task.get_coro(), "cr_frame", None)
        module = "" if frame is None else str(frame.f_globals.get("__name__", ""))
        if not task.done() and module.startswith(SERVER_SIDE):
            left.append(getattr(task.get_coro(), "__qualname__", repr(task)))
    return sorted(left)


@pytest.mark.temporal
async def test_a_server_stopped_while_its_run_goes_leaves_no_task_following_it(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A server stopped while a run it started goes on (on its workers: it outlives the
    server) stops following the run. The run's stream went on reading the store and
    long-polling the run's end after the server's shutdown, for as long as the run went; once
    Temporal went too (a process that keeps its loop, a test session's end), the poll failed
    with nobody to take its error: "Task exception was never retrieved ... RPCError('transport
    error')"."""
    gate = GateTool()
    script = scripted([Reply.call("gate", id="g1"), Reply(text="Done.")])
    spec = AgentSpec(model=script, tools=[gate.tool])
    store = FileStore(tmp_path / "sessions")
    before = asyncio.all_tasks()
    async with helper_app(
        temporal_client, store, spec, lambda: FileStore(tmp_path / "sessions")
    ) as app:
        async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
            sid = f"stopped-{uuid.uuid4().hex[:8]}"  # the Temporal server is every test's
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Go"})
            assert started.status_code == 202
            await asyncio.wait_for(gate.started.wait(), 60)
        left = _pending_since(before)  # the server stopped; the run goes on
        gate.release.set()  # it ends on its worker, which stops once it has
    assert left == [], f"tasks of the stopped server still follow its run: {left}"


async def test_runs_in_process_that_ended_leave_nothing_keyed_by_their_session(
    tmp_path: Path,
) -> None:
    """A development server runs many short runs on many sessions: once each ended, what it
    keeps of them is its bounded memory of ended runs, not an entry per session ever run."""
    spec = AgentSpec(model=scripted([Reply(text=f"Answer {n}.") for n in range(5)]))
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    runs = app.state.server.runs
    assert isinstance(runs, LocalRuns)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for n in range(5):
            sid = f"short-{n}"
            await client.post("/v1/sessions", json={"session_id": sid})
            async with stream(client, sid, after=0) as reader:
                started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
                await reader.until(ended(started.json()["run_id"]))
        assert [await runs.active(f"short-{n}") for n in range(5)] == [[]] * 5
        assert runs._streams == {}, "sessions whose runs all ended are still kept"


async def test_a_hub_that_failed_to_start_is_not_kept(tmp_path: Path) -> None:
    """A session's hub starts with the first stream: it reads the store (the entry the stream
    resumes at) and looks for the session's runs. A start cut short (the session deleted
    meanwhile, the store down a moment, the browser gone: its request cancelled) leaves no
    hub behind, else every later stream of the session would join one that never reads and
    show nothing live for the life of the process."""
    spec = AgentSpec(model=scripted([Reply(text="Hello there.")]))
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    hubs = app.state.server.hubs
    with pytest.raises(SessionNotFoundError):
        await hubs.hub("gone", 1)
    assert "gone" not in hubs.hubs

    writer = FileStore(tmp_path / "sessions")
    await writer.create_session("left")
    await writer.append_entries("left", [MessageEntry(id="q", message=user_message("Hi"))])
    starting = asyncio.create_task(hubs.hub("left", 1))
    await asyncio.sleep(0)  # one step: it reads the entry at seq 1 (in a thread: a cold file)
    assert "left" in hubs.hubs and not starting.done()
    starting.cancel()  # the browser went while its stream's hub started
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert "left" not in hubs.hubs

    async with (
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
        stream(client, "left", after=1) as reader,
    ):
        await reader.until(lambda r: r.live)
        started = await client.post("/v1/sessions/left/runs", json={"text": "Again"})
        await reader.until(ended(started.json()["run_id"]))
        await reader.until(lambda r: r.last_seq() == 3)


async def test_a_client_that_does_not_keep_up_is_let_go_not_buffered_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client reads slower than its session's frames come (a stalled phone, a reader that
    stopped reading with its connection open): the frames it has not taken are held for it
    up to :data:`~durable_agent.server.hub.BACKLOG`, then its stream ends, and it comes back
    with ``Last-Event-ID`` to replay from the store, not from server memory."""
    monkeypatch.setattr(hub_module, "BACKLOG", 150)
    text = "A long answer, streamed in very small pieces. " * 20
    spec = AgentSpec(model=scripted([Reply(text=text, chunk_size=3, chunk_delay=0.001)]))
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "busy"})
        async with stream(client, "busy", after=0) as reader:  # one that keeps up
            await reader.until(lambda r: r.live)
            hub = app.state.server.hubs.hubs["busy"]
            stalled, _, _ = hub.join()  # one that never takes a frame
            started = await client.post("/v1/sessions/busy/runs", json={"text": "Talk"})
            await reader.until(ended(started.json()["run_id"]))
            assert sum(f.event == "delta" for f in reader.frames) > 150
            assert stalled.qsize() == 1, "the frames of a client that does not read pile up"
            assert stalled.get_nowait() == Frame("gone", {"code": "TooSlow"})  # its stream ends
            assert stalled not in hub.subscribers
            hub.leave(stalled)


@pytest.mark.temporal
@pytest.mark.mongo
async def test_the_served_http_api_closes_the_store_it_opened_when_it_stops(
    temporal_client: Client, mongo_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable-agent serve`` (and ``dev``'s chat page) open the store from its spec; when the
    server stops, that store's MongoDB client is closed, not left to the garbage collector."""
    from pymongo.errors import InvalidOperation

    from durable_agent.cli import serve
    from durable_agent.cli.config import ENV_MONGODB_DB, OpenedStore, open_store
    from durable_agent.session import StoreClosedError
    from durable_agent.stores.mongo import MongoStore
    from tests.support.ferretdb import free_port
    from tests.support.mongo import new_database_name

    opened: list[OpenedStore] = []

    def kept(spec: str) -> OpenedStore:
        opened.append(open_store(spec))
        return opened[-1]

    monkeypatch.setattr(serve, "open_store", kept)
    monkeypatch.setenv(ENV_MONGODB_DB, new_database_name())
    url, task = await serve.start_http(
        mongo_uri, temporal_client, "closing-queue", port=free_port()
    )
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/v1/sessions")).status_code == 200
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    store = opened[0].store
    assert isinstance(store, MongoStore)
    with pytest.raises(StoreClosedError):
        await store.list_sessions()
    with pytest.raises(InvalidOperation, match="after close"):  # the client the CLI built
        await store.database.list_collection_names()
