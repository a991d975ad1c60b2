"""A deploy while runs are in flight: the old worker stops, a new build of the app takes the
queue (docs/design.md#deploys)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel, UnknownAgentError, new
from durable_agent.ai import Reply
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.durable_runs.test_approvals import SENT, Reader, email, send_email, shape, stored
from tests.support.temporal import running_worker
from tests.temporal.helpers import executor, queue

pytestmark = pytest.mark.temporal

QUICK = {"sticky_queue_schedule_to_start_timeout": timedelta(seconds=1)}
"""A stopped worker's runs go to the next one within a second."""


@pytest.mark.parametrize("calls", [1, 2])
async def test_a_decided_call_on_a_build_without_its_agent_fails_the_run_and_keeps_the_call(
    temporal_client: Client, calls: int
) -> None:
    """The new build renamed the agent while a call waited for approval: the run fails with
    ``UnknownAgentError`` and stores no result for the approved call (the tool never ran), so
    once a worker serves the agent again the next run carries the decided call out. ``calls``:
    the turn's calls (two run in parallel)."""
    SENT.clear()
    store, q = MemoryStore(), queue()

    def spec(*script: str | Reply) -> AgentSpec:
        return AgentSpec(model=ScriptedModel(list(script)), tools=(send_email,))

    ids = [f"c{i + 1}" for i in range(calls)]
    first = spec(Reply(tool_calls=[email(i) for i in ids]))
    async with running_worker(temporal_client, store, {"a": first}, task_queue=q, **QUICK):
        agent = await new("a", store=store, executor=executor(temporal_client, q))
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
    renamed = spec("renamed")
    async with running_worker(temporal_client, store, {"b": renamed}, task_queue=q, **QUICK):
        for call_id in ids:
            await asyncio.wait_for(agent.decide(call_id, True), 30)
        with pytest.raises(UnknownAgentError, match="unknown agent 'a'"):
            await asyncio.wait_for(stream.wait(), 30)
    decided = ["approval_request"] * calls + ["approval_decision"] * calls
    assert shape(stored(agent)) == ["user", "assistant", *decided]
    assert SENT == []
    back = spec("sent it")
    async with running_worker(temporal_client, store, {"a": back}, task_queue=q, **QUICK):
        await asyncio.wait_for((await agent.run()).wait(), 30)
    assert len(SENT) == calls
    assert shape(stored(agent))[2 + 2 * calls :] == ["tool_result"] * calls + ["assistant"]
