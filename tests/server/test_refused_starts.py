"""A refused request stores nothing: a run start on a new session that cannot start leaves no
session behind, in process and on Temporal."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent.session import SessionNotFoundError, SessionRecord
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import helper_app, scripted, serving, tool_script


class BlipAfterCreate(FileStore):
    """A FileStore whose disk is gone for the first record read after a session is created (a
    store blip between a run start's create and the rest of its start): that read fails as a
    real one does, the next ones work."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root_path, self.blip = root, False

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        record = await super().create_session(session_id, parent_id)
        self.blip = True
        return record

    async def load_session(self, session_id: str) -> SessionRecord:
        if not self.blip:
            return await super().load_session(session_id)
        self.blip = False
        away = self.root_path.with_name("away")
        self.root_path.rename(away)
        self.root_path.write_text("not a directory")  # a disk gone, not a session missing
        try:
            return await super().load_session(session_id)
        finally:
            self.root_path.unlink()
            away.rename(self.root_path)


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
