"""What a server keeps does not grow with what it served: a session's hub, once gone, leaves
no task behind, and the runs and streams that ended leave nothing keyed by their session."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent.server import hub as hub_module
from tests.server.support import serving, stream
from tests.server.test_stream_status import _on_temporal
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
