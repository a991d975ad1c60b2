"""A delete landing while a route acts on the session brings nothing back: the route answers
404 and the store holds no session of that ID, not even an empty one (deleted means deleted)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent import MessageEntry, SessionNotFoundError
from durable_agent.ai import Reply, ScriptedModel, user_message
from durable_agent.server import create_app
from durable_agent.session import Entry
from durable_agent.session.store import SessionRecord
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.durable_runs.test_approvals import email, send_email
from tests.server.support import ended, helper_client, serving, stream
from tests.support.polling import eventually

SID = "doomed"


class DeletedAfterItsRead(FileStore):
    """A real FileStore on which a DELETE of :data:`SID` lands right after the next read of it
    (the route's check that the session exists, or its handle's load)."""

    armed = False

    async def _deleted_now(self) -> None:
        if self.armed:
            self.armed = False
            await self.delete_session(SID)

    async def load_session(self, session_id: str) -> SessionRecord:
        record = await super().load_session(session_id)
        if session_id == SID:
            await self._deleted_now()
        return record

    async def load_entries(self, session_id: str) -> list[Entry]:
        entries = await super().load_entries(session_id)
        if session_id == SID:
            await self._deleted_now()
        return entries


ROUTES = [
    ("fork", {"child_id": "doomed-child"}),
    ("approvals/call-1", {"approved": True}),
    ("compact", {"keep_turns": 0}),
]


@pytest.mark.parametrize(("route", "body"), ROUTES, ids=[r for r, _ in ROUTES])
async def test_a_delete_landing_mid_request_is_not_undone(
    tmp_path: Path, route: str, body: dict[str, object]
) -> None:
    store = DeletedAfterItsRead(tmp_path / "sessions")
    await store.create_session(SID)
    await store.append_entries(SID, [MessageEntry(id="q", message=user_message("hello"))])
    app = create_app(store=store, agents={"a": AgentSpec(model=ScriptedModel(["summary"]))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        store.armed = True
        answer = await client.post(f"/v1/sessions/{SID}/{route}", json=body)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["type"] == "SessionNotFoundError"
        assert not store.armed, "the delete landed"
        listed = await client.get("/v1/sessions")
        assert [s["session_id"] for s in listed.json()["sessions"]] == []
    for session_id in (SID, "doomed-child"):
        with pytest.raises(SessionNotFoundError):
            await store.load_session(session_id)
    assert sorted(p.name for p in (tmp_path / "sessions").rglob("*")) == []


@pytest.mark.parametrize("after", [None, 1])
async def test_a_delete_landing_as_a_stream_opens_ends_it_cleanly(
    tmp_path: Path, after: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream's route found the session; the delete lands before the stream's first read.
    The client gets the stream's ``deleted`` event and a clean end (no cut connection), and
    the server logs no traceback."""
    store = DeletedAfterItsRead(tmp_path / "sessions")
    await store.create_session(SID)
    await store.append_entries(SID, [MessageEntry(id="q", message=user_message("hello"))])
    app = create_app(store=store, agents={"a": AgentSpec(model=ScriptedModel(["summary"]))})
    params = {} if after is None else {"after": after}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        store.armed = True
        async with client.stream("GET", f"/v1/sessions/{SID}/stream", params=params) as answer:
            body = (await answer.aread()).decode() if answer.status_code == 200 else ""
        assert not store.armed, "the delete landed"
        assert answer.status_code in (200, 404)
        if answer.status_code == 200:
            assert "event: deleted" in body, body
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


async def test_a_run_of_a_session_deleted_by_another_process_stays_out_of_the_new_one(
    tmp_path: Path,
) -> None:
    """``sessions rm`` in another process deletes the session while a run of this server
    process streams its reply, then the ID is created again. The new session shows nothing of
    that run (no live text, no status), lists no active run and takes a run: the old run was
    shown on its stream as the new session's, and refused every start as its active run."""
    old = Reply(text="the deleted conversation's reply " * 30, chunk_size=4, chunk_delay=0.02)
    model = ScriptedModel([old, "a fresh answer"])
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"a": AgentSpec(model=model)})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": SID})
        started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "a secret"})
        old_run = started.json()["run_id"]

        async def streaming() -> bool:
            return len(model.requests) == 1

        await eventually(streaming, within=10, what="the reply streams")
        elsewhere = FileStore(tmp_path / "sessions")  # the CLI's sessions rm, then a create
        await elsewhere.delete_session(SID)
        await elsewhere.create_session(SID)
        async with stream(client, SID, after=0) as reader:
            assert (await client.get(f"/v1/sessions/{SID}/runs")).json() == {"active": []}
            again = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "hello"})
            assert again.status_code == 202, again.text
            await reader.until(ended(again.json()["run_id"]), within=20)
        shown = [f for f in reader.frames if f.data.get("run_id") == old_run]
        assert shown == [], shown
        entries = await store.load_entries(SID)
        said = [e.message.text() for e in entries if isinstance(e, MessageEntry)]
        assert said == ["hello", "a fresh answer"]


@pytest.mark.temporal
async def test_a_temporal_run_of_a_deleted_session_does_not_make_the_new_one_busy(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``sessions rm`` (no ``--workflows``) in another process while a run waits for an
    approval, then the ID is created again: the new session lists no active run and takes a
    run. The waiting run was listed by the session ID alone and refused every start (409)."""
    model = ScriptedModel([Reply(tool_calls=[email()]), "a fresh answer"])
    spec = AgentSpec(model=model, tools=[send_email])
    async with helper_client(temporal_client, tmp_path, spec) as (client, _):
        await client.post("/v1/sessions", json={"session_id": SID})
        started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "mail bob"})
        old_run = started.json()["run_id"]

        async def waiting() -> bool:
            status = await client.get(f"/v1/sessions/{SID}/runs/{old_run}")
            return bool(status.json().get("status") == "awaiting_approval")

        await eventually(waiting, within=30, what="the run waits for its approval")
        elsewhere = FileStore(tmp_path / "sessions")  # the CLI's sessions rm, then a create
        await elsewhere.delete_session(SID)
        await elsewhere.create_session(SID)
        assert (await client.get(f"/v1/sessions/{SID}/runs")).json() == {"active": []}
        again = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "hello"})
        assert again.status_code == 202, again.text
