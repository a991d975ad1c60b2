"""Temporal unreachable from the server while a client streams a session whose run goes on: the
run goes on (its worker reaches Temporal), so the stream never says it ended; once Temporal is
back, the stream gets the run's true end (docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RetryConfig

from durable_agent import Reply
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, scripted, serving, stream
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually
from tests.support.tcp_proxy import TcpProxy, tcp_proxy
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal

GIVE_UP_FAST = RetryConfig(
    initial_interval_millis=50, max_interval_millis=200, max_elapsed_time_millis=2000, max_retries=2
)
"""The cut-off server's client retries a call a few times only: the outage reaches its code."""


def _app(client: Client, store: FileStore, queue: str) -> FastAPI:
    app = create_app(store=store, temporal=client, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    return app


@contextlib.asynccontextmanager
async def _cut_off(
    temporal: Client, tmp_path: Path, gate: GateTool
) -> AsyncIterator[tuple[TcpProxy, httpx.AsyncClient, httpx.AsyncClient]]:
    """A server whose Temporal client goes through a proxy the test cuts, another reaching
    Temporal directly (a replica), a worker whose model waits in ``gate``; the proxy and a
    client of each server."""
    sessions = tmp_path / "sessions"
    queue = f"test-{uuid.uuid4().hex[:12]}"
    script = [Reply.call("gate", id="g1"), Reply(text="Opened.")]
    spec = AgentSpec(model=scripted(script), tools=[gate.tool])
    async with tcp_proxy(temporal.service_client.config.target_host) as proxy:
        through = await Client.connect(
            proxy.address, data_converter=pydantic_data_converter, retry_config=GIVE_UP_FAST
        )
        async with (
            running_worker(temporal, FileStore(sessions), {"helper": spec}, task_queue=queue),
            serving(_app(through, FileStore(sessions), queue)) as url,
            serving(_app(temporal, FileStore(sessions), queue)) as other_url,
            httpx.AsyncClient(base_url=url) as client,
            httpx.AsyncClient(base_url=other_url) as other,
        ):
            yield proxy, client, other


def _statuses(reader: Reader, run_id: str) -> list[str]:
    return [
        f.data["status"] for f in reader.frames if f.event == "run" and f.data["run_id"] == run_id
    ]


@pytest.mark.parametrize("starter", ["replica", "itself"])
async def test_an_outage_of_temporal_never_ends_a_streamed_run(
    temporal_client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture, starter: str
) -> None:
    """The run started through a replica (the server watches it) or through the server itself
    (it relays it); Temporal is cut off from the server while the run waits in a tool."""
    caplog.set_level(logging.INFO, logger="durable_agent")
    gate = GateTool()
    sid = f"outage-{uuid.uuid4().hex[:8]}"
    async with _cut_off(temporal_client, tmp_path, gate) as (proxy, client, other):
        assert (await client.post("/v1/sessions", json={"session_id": sid})).status_code == 201
        async with stream(client, sid, after=0) as reader:
            starts = other if starter == "replica" else client
            started = await starts.post(f"/v1/sessions/{sid}/runs", json={"text": "Open"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await asyncio.wait_for(gate.started.wait(), 60)
            await reader.until(lambda r: "started" in _statuses(r, run_id), within=30)
            await proxy.cut()

            async def noticed() -> bool:  # the outage logged, or (wrongly) the run's end sent
                logged = any(
                    r.levelno >= logging.WARNING and run_id in r.getMessage()
                    for r in caplog.records
                )
                return logged or ended(run_id)(reader)

            await eventually(noticed, within=60, what="the server noticing the outage")
            await proxy.restore()
            gate.release.set()
            await reader.until(ended(run_id), within=60)
        assert _statuses(reader, run_id)[-1] == "completed", reader.frames
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len([r for r in warned if run_id in r.getMessage()]) == 1, caplog.text
        assert "failed" not in _statuses(reader, run_id), reader.frames
        status = await client.get(f"/v1/sessions/{sid}/runs/{run_id}")
        assert status.json()["status"] == "completed", status.text
