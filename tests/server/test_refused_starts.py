"""The run routes as a front-end relies on them: a refused run start leaves no session behind,
a cancel is idempotent and an unknown run 404, and a watched run reads the session record only
where it must; in process and on Temporal."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.ai import Reply
from durable_agent.durable import follow
from durable_agent.server.runs import STORE_UNAVAILABLE
from durable_agent.session import MessageEntry, SessionNotFoundError, SessionRecord
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.server.support import (
    ended,
    helper_app,
    helper_client,
    scripted,
    serving,
    stream,
    tool_script,
)
from tests.support.disk import SwitchedDisk
from tests.support.polling import eventually


class Blip(SwitchedDisk):
    """A FileStore whose disk is gone for the first record read once ``armed`` (a store blip):
    that read fails as a real one does, the next ones work."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.armed, self.blips = False, 0

    async def load_session(self, session_id: str) -> SessionRecord:
        if not self.armed:
            return await super().load_session(session_id)
        self.armed, self.blips = False, self.blips + 1
        self.down()
        try:
            return await super().load_session(session_id)
        finally:
            self.up()


class BlipAfterCreate(Blip):
    """A blip at the first record read after a session is created (between a run start's
    create and the rest of its start)."""

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        record = await super().create_session(session_id, parent_id)
        self.armed = True
        return record


async def test_a_run_start_refused_after_its_session_was_made_leaves_none(
    tmp_path: Path,
) -> None:
    await _refused_start_leaves_none(None, tmp_path)


@pytest.mark.temporal
async def test_on_temporal_a_run_start_refused_after_its_session_was_made_leaves_none(
    temporal_client: Client, tmp_path: Path
) -> None:
    await _refused_start_leaves_none(temporal_client, tmp_path)


async def _refused_start_leaves_none(temporal: Client | None, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = BlipAfterCreate(root)
    spec = AgentSpec(model=scripted(tool_script()))
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        r = await client.post("/v1/sessions/new1/runs", json={"text": "hi"})
        assert r.status_code == 503, r.text
        with pytest.raises(SessionNotFoundError):
            await FileStore(root).load_session("new1")
        listed = await client.get("/v1/sessions")
        assert listed.json()["sessions"] == []


@pytest.mark.temporal
async def test_on_temporal_a_store_blip_at_a_run_start_is_a_503_that_starts_nothing(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A run start on Temporal reads the session record (for the run's memo) before it starts
    the workflow: the store failing then is a 503 that names nothing of the store, no workflow
    started and nothing stored; the same request sent again starts the run."""
    root = tmp_path / "sessions"
    store = Blip(root)
    sid = f"blip-{uuid.uuid4().hex[:8]}"  # the Temporal server is shared
    await store.create_session(sid)
    spec = AgentSpec(model=scripted([Reply(text="Hello.")]))
    body = {"text": "hi", "run_id": "r1"}
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        store.armed = True
        r = await client.post(f"/v1/sessions/{sid}/runs", json=body)
        assert store.blips == 1
        assert r.status_code == 503, r.text
        assert r.json()["error"] == {"type": "StoreUnavailableError", "message": STORE_UNAVAILABLE}
        with pytest.raises(RPCError) as missing:
            await temporal_client.get_workflow_handle(run_workflow_id(sid, "r1")).describe()
        assert missing.value.status == RPCStatusCode.NOT_FOUND
        assert await FileStore(root).load_entries(sid) == []

        async with stream(client, sid, after=0) as reader:
            again = await client.post(f"/v1/sessions/{sid}/runs", json=body)
            assert again.status_code == 202, again.text
            assert again.json()["run_id"] == "r1"
            await reader.until(ended("r1"), within=60)
    said = [e.message.text() for e in await store.load_entries(sid) if isinstance(e, MessageEntry)]
    assert said == ["hi", "Hello."]


@pytest.mark.temporal
async def test_on_temporal_inputs_over_what_a_start_carries_are_a_413_leaving_no_session(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A note of quotes, under the payload limit as stored, is escaped once more in the run's
    workflow start and so is over what Temporal takes: 413 ``PayloadTooLargeError`` saying so,
    no session left; it was a 503 "try again in a moment" no retry ever got past."""
    note = {"type": "custom", "id": "n1", "created_at": "2025-01-01T00:00:00Z", "kind": "note"}
    quotes = {"inputs": [{**note, "data": '"' * 700_000}]}
    spec = AgentSpec(model=scripted([Reply(text="Hello.")]))
    async with helper_client(temporal_client, tmp_path, spec) as (client, store):
        r = await client.post("/v1/sessions/q1/runs", json=quotes)
        assert r.status_code == 413, r.text
        error = r.json()["error"]
        assert error["type"] == "PayloadTooLargeError" and "workflow" in error["message"], error
        assert (await client.get("/v1/sessions/q1")).status_code == 404
        assert await store.list_sessions() == []


async def test_cancel_of_an_ended_run_is_202_and_of_an_unknown_one_404(tmp_path: Path) -> None:
    await _cancels(None, tmp_path)


@pytest.mark.temporal
async def test_on_temporal_cancel_of_an_ended_run_is_202_and_of_an_unknown_one_404(
    temporal_client: Client, tmp_path: Path
) -> None:
    await _cancels(temporal_client, tmp_path)


async def _cancels(temporal: Client | None, tmp_path: Path) -> None:
    """Cancelling is idempotent: a run that ended is cancelled as far as it goes (202, nothing
    changes); a run the session never had is 404, on either backend alike."""
    spec = AgentSpec(model=scripted(tool_script()))
    sid = f"cancels-{uuid.uuid4().hex[:8]}"  # the Temporal server is shared: runs of "s1" too
    async with helper_client(temporal, tmp_path, spec) as (client, _):
        started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "hi"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]

        async def done() -> bool:
            got = await client.get(f"/v1/sessions/{sid}/runs/{run_id}")
            return bool(got.json()["status"] == "completed")

        await eventually(done, within=30, interval=0.1, what="the run's end")
        ended = await client.post(f"/v1/sessions/{sid}/runs/{run_id}/cancel")
        assert ended.status_code == 202, ended.text
        status = await client.get(f"/v1/sessions/{sid}/runs/{run_id}")
        assert status.json()["status"] == "completed"
        for nobody in ["nope", "x" * 1000, "a%20b", "%C3%A9t%C3%A9"]:  # none a start would take
            for method, path in [("POST", f"{nobody}/cancel"), ("GET", nobody)]:
                unknown = await client.request(method, f"/v1/sessions/{sid}/runs/{path}")
                assert unknown.status_code == 404, (method, nobody[:20], unknown.text)
                assert unknown.json()["error"]["type"] == "RunNotFoundError"


class CountsRecords(FileStore):
    """A FileStore that counts its record reads (``load_session``)."""

    records = 0

    async def load_session(self, session_id: str) -> SessionRecord:
        self.records += 1
        return await super().load_session(session_id)


@pytest.mark.temporal
async def test_a_watched_run_reads_the_session_record_only_where_needed(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session made, a stream on it and a run to its end: the record is read by the stream's
    404 check, by the run's start (its memo names the session's creation) and by the hub's
    first read of an entry hanging off none it read (a session created again?), not again by
    the route that just created it, the hub the stream starts, or each look for the session's
    runs (bench/http_bench.py --cost-only counts the same). The hub's follower also reads it
    after each ``CONFIRM_EVERY`` seconds without news (tests/test_follow_recreated.py): on a
    loaded machine this run was that slow once, so that check is put out of its reach."""
    monkeypatch.setattr(follow, "CONFIRM_EVERY", 3600.0)
    root = tmp_path / "sessions"
    store = CountsRecords(root)
    spec = AgentSpec(model=scripted(tool_script()))
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        made = await client.post("/v1/sessions", json={"session_id": "w1"})
        assert made.status_code == 201 and made.json()["created_at"]
        async with stream(client, "w1", after=0) as reader:
            started = await client.post("/v1/sessions/w1/runs", json={"text": "hi"})
            await reader.until(ended(started.json()["run_id"]))
        assert store.records <= 3, store.records


@pytest.mark.temporal
async def test_a_server_on_another_store_than_its_workers_answers_a_typed_503(
    temporal_client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server given another store than its workers (a deployment's mistake): a run start is
    refused before anything is created, as the library refuses it, with a typed 503 and one
    log line for the operator. It was a bare 500 "Internal Server Error" and a traceback
    logged as a bug's."""
    from durable_agent.workflows.store_check import poller_identities

    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted(tool_script()))
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(tmp_path / "other")) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        queue = app.state.server.runs.executor.task_queue
        await eventually(lambda: poller_identities(temporal_client, queue), what="a poller")
        answer = await client.post("/v1/sessions/m1/runs", json={"text": "hi"})
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["type"] == "StoreMismatchError", answer.text
    with pytest.raises(SessionNotFoundError):
        await store.load_session("m1")
    said = [r for r in caplog.records if "another store" in r.getMessage()]
    assert [(r.name, r.levelname, r.exc_info) for r in said] == [
        ("durable_agent.server", "ERROR", None)
    ], said
