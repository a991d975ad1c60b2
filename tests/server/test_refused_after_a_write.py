"""Requests the store fails half-way through: a fork into an ID the server picked leaves no child
the client cannot name, and a decision stored before the store (or Temporal) failed is answered
as stored, its follow-up run started by a retry; in process and on Temporal."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent import ApprovalDecision, Entry, MessageEntry
from durable_agent.ai import Reply, ToolCall, tool, user_message
from durable_agent.session import SessionRecord
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, helper_app, scripted, serving, stream, tool_script
from tests.support.disk import SwitchedDisk


class ForkCopiesFail(SwitchedDisk):
    """The disk is gone for the append after a fork created its child (the copies), for the
    first ``fails`` forks."""

    child_made, fails = False, 2

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        record = await super().create_session(session_id, parent_id)
        self.child_made = parent_id is not None and self.fails > 0
        self.fails -= parent_id is not None
        return record

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """What a fork copies with (docs/design.md#tree-and-views)."""
        if not self.child_made:
            return await super().append_if_last(session_id, entries, last_id)
        self.child_made = False
        self.down()
        try:
            return await super().append_if_last(session_id, entries, last_id)
        finally:
            self.up()


async def test_a_fork_refused_into_an_id_the_server_picked_leaves_no_child(
    tmp_path: Path,
) -> None:
    await _refused_fork(None, tmp_path)


@pytest.mark.temporal
async def test_on_temporal_a_fork_refused_into_an_id_the_server_picked_leaves_no_child(
    temporal_client: Client, tmp_path: Path
) -> None:
    await _refused_fork(temporal_client, tmp_path)


async def _refused_fork(temporal: Client | None, tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = ForkCopiesFail(root)
    await store.create_session("p")
    await store.append_entries("p", [MessageEntry(id="q", message=user_message("hello"))])
    spec = AgentSpec(model=scripted(tool_script()))
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        r = await client.post("/v1/sessions/p/fork", json={})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["type"] == "StoreUnavailableError"
        listed = (await client.get("/v1/sessions")).json()["sessions"]
        assert [s["session_id"] for s in listed] == ["p"], "no child the client cannot name"
        # a child the client named stays, for its retry to complete (docs/design.md)
        named = await client.post("/v1/sessions/p/fork", json={"child_id": "c"})
        assert named.status_code == 503, named.text
        assert (await FileStore(root).load_session("c")).parent_id == "p"
        again = await client.post("/v1/sessions/p/fork", json={"child_id": "c"})
        assert again.status_code == 201, again.text
        assert again.json()["last_seq"] == 1
        ok = await client.post("/v1/sessions/p/fork", json={})
        assert ok.status_code == 201, ok.text
        assert ok.json()["parent_id"] == "p" and ok.json()["last_seq"] == 1


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


class DownAfterDecision(SwitchedDisk):
    """The disk goes once a decision is stored, and stays gone until ``up``."""

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """What a decision is stored with (docs/design.md#approvals-and-steering)."""
        stored = await super().append_if_last(session_id, entries, last_id)
        if any(isinstance(e, ApprovalDecision) for e in entries):
            self.down()
        return stored


async def test_a_decision_stored_before_the_store_failed_is_answered_as_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _decided_then_down(None, tmp_path, caplog)


@pytest.mark.temporal
async def test_on_temporal_a_decision_stored_before_the_store_failed_is_answered_as_stored(
    temporal_client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _decided_then_down(temporal_client, tmp_path, caplog)


async def _decided_then_down(
    temporal: Client | None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run asks, parks and ends; the decision that settles the turn is stored, then the
    store fails before the run that carries the call out starts: the client is told its
    decision (200), and the same decision sent again starts that run."""
    root = tmp_path / "sessions"
    store = DownAfterDecision(root)
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "bob@example.com"})
    replies = [Reply(tool_calls=[call]), Reply(text="Sent.")]
    spec = AgentSpec(model=scripted(replies), tools=[send_email], approval_wait=0.05)
    sid = f"mail-{uuid.uuid4().hex[:6]}"
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            first = (await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Mail"})).json()
            await reader.until(ended(first["run_id"]), within=60)
            path = f"/v1/sessions/{sid}/approvals/call-1"
            decided = await client.post(path, json={"approved": True})
            assert decided.status_code == 200, decided.text
            assert decided.json()["kind"] == "approval_decision"
            assert decided.json()["approved"] is True
            logged = [r for r in caplog.records if "after a decision" in r.getMessage()]
            assert logged, "the server's log tells the run that did not start"
            assert all(r.exc_info is None and "\n" not in r.getMessage() for r in logged)
            store.up()
            again = await client.post(path, json={"approved": True})
            assert again.status_code == 200, again.text
            assert again.json()["id"] == decided.json()["id"]

            def runs(r: object) -> set[str]:
                return {f.data["run_id"] for f in reader.frames if f.event == "run"} - {
                    first["run_id"]
                }

            await reader.until(runs, within=60)
            (second,) = runs(reader)
            await reader.until(ended(second), within=60)
        said = [
            (e.message.role, e.message.text())
            for e in await FileStore(root).load_entries(sid)
            if isinstance(e, MessageEntry)
        ]
        assert said[-2:] == [("tool_result", "sent to bob@example.com"), ("assistant", "Sent.")]


class ReadAfterCreateFails(SwitchedDisk):
    """The disk is gone for the first read of a session's entries (all, or after a seq) after
    it was created, for the first ``fails`` sessions."""

    made, fails = False, 2

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        record = await super().create_session(session_id, parent_id)
        self.made, self.fails = self.fails > 0, self.fails - 1
        return record

    def _blip(self) -> bool:
        if self.made:
            self.made = False
            self.down()
            return True
        return False

    async def load_entries(self, session_id: str) -> list[Entry]:
        blip = self._blip()
        try:
            return await super().load_entries(session_id)
        finally:
            if blip:
                self.up()

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        blip = self._blip()
        try:
            return await super().load_entries_after(session_id, after, limit)
        finally:
            if blip:
                self.up()


async def test_a_session_create_refused_after_the_store_made_it_leaves_none(
    tmp_path: Path,
) -> None:
    """The store fails between making the session and reading it for the answer: the client
    is told 503, so there is no session, named by it or by the server."""
    root = tmp_path / "sessions"
    store = ReadAfterCreateFails(root)
    spec = AgentSpec(model=scripted(tool_script()))
    async with (
        helper_app(None, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for body in [{}, {"session_id": "named"}]:
            r = await client.post("/v1/sessions", json=body)
            assert r.status_code == 503, r.text
            assert (await client.get("/v1/sessions")).json()["sessions"] == [], body
        made = await client.post("/v1/sessions", json={"session_id": "named"})
        assert made.status_code == 201, made.text


async def test_an_agui_run_refused_after_its_session_was_made_leaves_none(
    tmp_path: Path,
) -> None:
    await _refused_agui(None, tmp_path)


@pytest.mark.temporal
async def test_on_temporal_an_agui_run_refused_after_its_session_was_made_leaves_none(
    temporal_client: Client, tmp_path: Path
) -> None:
    await _refused_agui(temporal_client, tmp_path)


async def _refused_agui(temporal: Client | None, tmp_path: Path) -> None:
    """As a run start through the run route (test_refused_starts), one through AG-UI: the
    store fails as the route reads the session it made, before the run starts."""
    root = tmp_path / "sessions"
    store = ReadAfterCreateFails(root)
    spec = AgentSpec(model=scripted(tool_script()))
    body = {
        "threadId": "new1",
        "runId": "client-run",
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        r = await client.post("/v1/agui", json=body)
        assert r.status_code == 503, r.text
        assert (await client.get("/v1/sessions")).json()["sessions"] == []
        store.fails = 0
        async with client.stream("POST", "/v1/agui", json=body) as ok:
            assert ok.status_code == 200
            assert "RUN_FINISHED" in (await ok.aread()).decode()
