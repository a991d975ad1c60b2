"""Two replicas of the server (one Temporal, one store, nothing else shared) each asked to start
a run on one idle session at the same moment: both find it idle (the other's run is not listed
yet), and only one may run; the other fails with ``RunActiveError``, nothing of it stored, as a
second start through one server is refused (docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent.ai import Reply
from durable_agent.server import temporal_runs
from durable_agent.session.tree import path
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, helper_app, replica, scripted, serving, stream

pytestmark = pytest.mark.temporal

SID = "desk"


class BothIdle:
    """Holds each start just after its busy check (as it opens its handle) until the other
    start's check ran too: with nothing else to tell them apart, both start a run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._arrived = 0
        self._both = asyncio.Event()
        opened = getattr(temporal_runs, "new")  # noqa: B009 (not exported: the module's own)

        async def new(*args: Any, **kwargs: Any) -> Any:
            self._arrived += 1
            if self._arrived == 2:
                self._both.set()
            await asyncio.wait_for(self._both.wait(), 30)
            return await opened(*args, **kwargs)

        monkeypatch.setattr(temporal_runs, "new", new)


def _frames_of(reader: Reader, status: str) -> list[dict[str, Any]]:
    return [f.data for f in reader.frames if f.event == "run" and f.data["status"] == status]


async def test_two_replicas_starting_a_run_at_once_run_one(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="A."), Reply(text="B.")]))
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(store.root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
        replica(app, temporal_client, FileStore(store.root)) as (_, peer),
    ):
        await client.post("/v1/sessions", json={"session_id": SID})
        BothIdle(monkeypatch)

        async def start(via: httpx.AsyncClient, text: str) -> httpx.Response:
            return await via.post(f"/v1/sessions/{SID}/runs", json={"text": text})

        async with stream(client, SID, after=0) as reader:
            both = await asyncio.gather(start(client, "one"), start(peer, "two"))
            assert [r.status_code for r in both] == [202, 202], [r.text for r in both]
            for run_id in [r.json()["run_id"] for r in both]:
                await reader.until(ended(run_id), 60)
            failed = _frames_of(reader, "failed")
            assert [f["error"]["type"] for f in failed] == ["RunActiveError"], failed
            assert len(_frames_of(reader, "completed")) == 1
    stored = await store.load_entries(SID)
    said = [e.message.text() for e in path(stored, stored[-1].id) if hasattr(e, "message")]
    assert len(stored) == 2 and said in (["one", "A."], ["two", "A."]), said
