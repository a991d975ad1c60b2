"""How soon a client following a Temporal run from the store sees a tool's result.

No live delta announces a tool result: the client's stream learns of it by reading the session,
with a back-off that grows while nothing new is stored. While the run's tools run, that back-off
stops at ``TOOL_READ`` (docs/design.md#receipts), so a long tool's result (and the next reply,
whose live text the client reads only after it) shows within a fraction of a second of being
stored, not at the idle pace.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent import MessageEntry, Reply, ScriptedModel, new
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, run_stream
from tests.durable_runs.test_approvals import Reader
from tests.server.test_stream_order import Reads
from tests.support.gate_tool import GateTool
from tests.support.temporal import running_worker
from tests.temporal.helpers import executor, queue, sid

pytestmark = pytest.mark.temporal

QUIET_READS = 5
"""Reads that find nothing while the tool works before it is released: at the idle pace (a
tenth of a second, doubling) the next one is due 3.2 s later, at ``TOOL_READ`` 0.25 s later."""
BOUND = 1.5
"""Seconds from the tool's release to its result's receipt at the client at most."""


async def test_a_long_tools_result_reaches_the_client_at_the_tool_pace(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_stream, "SLOWEST_READ", 30.0)  # the idle pace, made plain
    store, worker_store = FileStore(tmp_path), FileStore(tmp_path)
    reads, gate, q = Reads(store), GateTool(), queue()
    # the reply after the tool starts late: nothing but a read of the session tells its result
    lm = ScriptedModel([Reply.call("gate", id="g1"), Reply(text="Done.", delay=4.0)])
    agents = {"paced": AgentSpec(model=lm, tools=[gate.tool])}
    async with running_worker(temporal_client, worker_store, agents, task_queue=q):
        agent = await new(
            "paced", store=store, session_id=sid("pace"), executor=executor(temporal_client, q)
        )
        reader = Reader(await agent.run("go"))
        await reader.until("tool_execution_start")  # the client read the call: tools run
        await asyncio.wait_for(gate.started.wait(), 30)
        for _ in range(QUIET_READS):
            await asyncio.wait_for(reads.one_more(), 30)
        released = time.monotonic()
        gate.release.set()
        await reader.until("tool_execution_end")
        took = time.monotonic() - released
        await reader.done()
    assert took < BOUND, f"the tool's result reached the client {took:.2f} s after the tool"
    last = agent.entries()[-1]
    assert isinstance(last, MessageEntry) and last.message.text() == "Done."
