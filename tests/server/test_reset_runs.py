"""An operator resets a failed run (``temporal workflow reset``, README "Operating runs") while a
client follows its session over HTTP: the stream shows the run started again, the retry's
entries and the reset execution's true end; the run's status answers the reset execution's
outcome and reason, never the first execution's. On the server that followed the first
execution to its end as on a fresh one (docs/design.md#http-api)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from durable_agent.ai import ModelError, Reply
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.server.support import Reader, helper_app, replica, scripted, serving, stream
from tests.support.polling import eventually
from tests.temporal.test_reset import reset

pytestmark = pytest.mark.temporal

FIRST = ModelError("upstream rejected the request (HTTP 400)", retryable=False)
AGAIN = ModelError("upstream overloaded for good (HTTP 529)", retryable=False)


def _runs(reader: Reader, run_id: str) -> list[dict[str, Any]]:
    return [f.data for f in reader.frames if f.event == "run" and f.data["run_id"] == run_id]


async def _closed(client: Client, workflow_id: str) -> None:
    """Wait for the workflow's latest execution to close, however it ends."""
    handle = client.get_workflow_handle(workflow_id)

    async def closed() -> bool:
        status = (await handle.describe()).status
        return status not in (None, WorkflowExecutionStatus.RUNNING)

    await eventually(closed, within=60, what=f"{workflow_id} closed")


@pytest.mark.parametrize("then", ["completes", "fails-again"])
@pytest.mark.parametrize("server", ["followed", "fresh"])
async def test_a_reset_failed_run_streams_its_retry(
    temporal_client: Client, tmp_path: Path, then: str, server: str
) -> None:
    await _reset_and_follow(temporal_client, tmp_path, then, server, stream_too=True)


@pytest.mark.parametrize("then", ["completes", "fails-again"])
@pytest.mark.parametrize("server", ["followed", "fresh"])
async def test_a_reset_failed_run_answers_its_retry_s_status(
    temporal_client: Client, tmp_path: Path, then: str, server: str
) -> None:
    await _reset_and_follow(temporal_client, tmp_path, then, server, stream_too=False)


async def _reset_and_follow(
    temporal_client: Client, tmp_path: Path, then: str, server: str, *, stream_too: bool
) -> None:
    """A run fails through the server (a stream following it), an operator resets it, and its
    retry ``then`` completes or fails for another reason, a stream of ``server`` following."""
    second = Reply(text="Fine now.") if then == "completes" else Reply(error=AGAIN)
    spec = AgentSpec(model=scripted([Reply(error=FIRST), second]))
    store = FileStore(tmp_path / "sessions")
    sid = f"reset-{uuid.uuid4().hex[:8]}"
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(store.root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as first,
        replica(app, temporal_client, FileStore(store.root)) as (_, fresh),
    ):
        await first.post("/v1/sessions", json={"session_id": sid})
        async with stream(first, sid, after=0) as before:
            started = await first.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
            run_id = started.json()["run_id"]
            await before.until(lambda r: len(_runs(r, run_id)) == 2, within=60)
        assert _runs(before, run_id)[-1]["error"]["message"].endswith("(HTTP 400)")
        client = first if server == "followed" else fresh
        async with stream(client, sid, after=0) as reader:
            await reader.until(lambda r: r.live)
            wid = run_workflow_id(sid, run_id)
            reset(temporal_client, wid, "--type", "FirstWorkflowTask")
            await _closed(temporal_client, wid)
            stored = await store.load_entries(sid)
            status = (await client.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
            if then == "completes":
                assert status == {"run_id": run_id, "status": "completed"}, status
            else:
                assert status["status"] == "failed", status
                assert status["error"]["message"].endswith("(HTTP 529)"), status
            if not stream_too:
                return

            async def told() -> bool:
                return reader.last_seq() == len(stored) and len(_runs(reader, run_id)) >= 2

            await eventually(told, within=20, what="the retry's entries and its end")
        shown = _runs(reader, run_id)
        assert shown[0]["status"] == "started", shown
        if then == "completes":
            assert shown[-1] == {"run_id": run_id, "status": "completed"}, shown
        else:
            assert shown[-1]["status"] == "failed", shown
            assert shown[-1]["error"] == status["error"], shown
