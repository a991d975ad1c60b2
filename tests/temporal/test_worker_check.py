"""``durable-agent worker --check`` proves polling via describe_task_queue."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from temporalio.client import Client

from durable_agent import ScriptedModel
from durable_agent.cli.worker import check_worker, poller_identities
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import eventually, queue

pytestmark = pytest.mark.temporal


async def test_check_sees_pollers_only_while_a_worker_polls(
    temporal_client: Client, address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    q, out = queue(), io.StringIO()
    console = Console(file=out, width=200)
    assert await poller_identities(temporal_client, q) == []
    assert await check_worker(q, console) == 1
    assert f"no worker polls task queue {q}" in out.getvalue()
    lm = ScriptedModel(["x"])
    async with running_worker(
        temporal_client, MemoryStore(), {"a": AgentSpec(model=lm)}, task_queue=q
    ):

        async def polled() -> list[str] | None:
            return await poller_identities(temporal_client, q) or None

        assert await eventually(polled, within=20, interval=0.2, what="a poller")
        assert await check_worker(q, console) == 0
        assert f"poller(s) on task queue {q}" in out.getvalue()
