"""The workers a client sees on its queue: ``describe_task_queue``'s pollers (the warning that no
worker serves a queue, and the store check, read them)."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from durable_agent.workflows.store_check import poller_identities
from tests.support.temporal import running_worker
from tests.temporal.helpers import eventually, queue

pytestmark = pytest.mark.temporal


async def test_pollers_are_listed_only_while_a_worker_polls(temporal_client: Client) -> None:
    q = queue()
    assert await poller_identities(temporal_client, q) == []
    lm = ScriptedModel(["x"])
    async with running_worker(
        temporal_client, MemoryStore(), {"a": AgentSpec(model=lm)}, task_queue=q
    ):

        async def polled() -> list[str] | None:
            return await poller_identities(temporal_client, q) or None

        assert await eventually(polled, within=20, interval=0.2, what="a poller")
