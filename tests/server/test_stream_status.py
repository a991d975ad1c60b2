"""A stream's ``run`` frames say what the session's runs do now: a client joining while a run
waits for people is told so first, and a stream sees each later wait begin and end, in process
and on Temporal."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, scripted, serving, stream
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

SID = "waits"


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


def _spec() -> AgentSpec:
    """Two turns that each wait for a decision, then a reply."""
    replies = [
        Reply(tool_calls=[ToolCall(id=f"call-{n}", name="send_email", arguments={"to": to})])
        for n, to in ((1, "ann@example.com"), (2, "bob@example.com"))
    ]
    return AgentSpec(model=scripted([*replies, Reply(text="Both sent.")]), tools=[send_email])


def _statuses(reader: Reader, run_id: str) -> list[str]:
    return [
        f.data["status"] for f in reader.frames if f.event == "run" and f.data["run_id"] == run_id
    ]


async def _waits_for(client: httpx.AsyncClient, call: str) -> None:
    async def pending() -> bool:
        got = await client.get(f"/v1/sessions/{SID}/approvals")
        return [p["tool_call_id"] for p in got.json()["pending"]] == [call]

    await eventually(pending, within=60, what=f"{call} waiting for a decision")


async def _scenario(app: FastAPI, other: FastAPI | None = None) -> None:
    """``other``: a second server of the same deployment, asked for the run it did not start."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail them"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        await _waits_for(client, "call-1")
        waiting = {"run_id": run_id, "status": "awaiting_approval"}
        assert (await client.get(f"/v1/sessions/{SID}/runs/{run_id}")).json() == waiting
        if other is not None:
            async with serving(other) as at, httpx.AsyncClient(base_url=at) as asking:
                got = await asking.get(f"/v1/sessions/{SID}/runs/{run_id}")
                assert got.json() == waiting
        # nobody streamed the session yet: this client's stream is the server's first look
        async with stream(client, SID) as reader:
            await reader.until(lambda r: r.frames)
            first = reader.frames[0]
            assert (first.event, first.data) == (
                "run",
                {"run_id": run_id, "status": "awaiting_approval"},
            )
            async with stream(client, SID, after=0) as replaying:  # runs first, then entries
                await replaying.until(lambda r: r.live)
                assert [f.event for f in replaying.frames][:2] == ["run", "entry"]
                assert replaying.frames[0].data == first.data
            decided = await client.post(
                f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}
            )
            assert decided.status_code == 200, decided.text
            # the run goes on, then waits again while this client watches
            await _waits_for(client, "call-2")
            again = ["awaiting_approval", "started", "awaiting_approval"]
            await reader.until(lambda r: _statuses(r, run_id) == again, within=60)
            decided = await client.post(
                f"/v1/sessions/{SID}/approvals/call-2", json={"approved": True}
            )
            assert decided.status_code == 200, decided.text
            await reader.until(ended(run_id), within=60)
        assert _statuses(reader, run_id) == [
            "awaiting_approval",
            "started",
            "awaiting_approval",
            "started",
            "completed",
        ]


async def test_a_joining_client_sees_a_wait_in_process(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    await _scenario(create_app(store=store, agents={"mail": _spec()}))


@asynccontextmanager
async def _on_temporal(client: Client, tmp_path: Path) -> AsyncIterator[tuple[FastAPI, FastAPI]]:
    """Two servers of one deployment (one store, one task queue) and its worker."""
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    apps = []
    for _ in range(2):
        app = create_app(store=store, temporal=client, task_queue=queue, agents=["mail"])
        runs = app.state.server.runs
        assert isinstance(runs, TemporalRuns)
        runs.executor.timeouts = FAST
        apps.append(app)
    async with running_worker(client, store, {"mail": _spec()}, task_queue=queue):
        yield apps[0], apps[1]


@pytest.mark.temporal
async def test_a_joining_client_sees_a_wait_on_temporal(
    temporal_client: Client, tmp_path: Path
) -> None:
    async with _on_temporal(temporal_client, tmp_path) as (app, other):
        await _scenario(app, other)
