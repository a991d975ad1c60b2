"""Two ``durable-agent approve`` processes (or ``chat``) that each find the same parked turn
settled start the run that carries its calls out: one run, each call carried out once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import Client

from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.cli.approvals import continuation
from durable_agent.durable.agent import new
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import scripted
from tests.support.temporal import running_worker
from tests.temporal.helpers import executor, queue, sid

pytestmark = pytest.mark.temporal

PAID: list[str] = []


@tool(approval=True)
async def pay(to: str) -> str:
    """Pay someone (a person approves each payment)."""
    PAID.append(to)
    return f"paid {to}"


async def test_two_continuations_of_one_settled_turn_are_one_run(
    temporal_client: Client, tmp_path: Path
) -> None:
    PAID.clear()
    calls = [ToolCall(id=f"call-{to}", name="pay", arguments={"to": to}) for to in ("bob", "eve")]
    replies = [Reply(tool_calls=calls), Reply(text="Paid both."), Reply(text="Paid again.")]
    spec = AgentSpec(model=scripted(replies), tools=[pay], approval_wait=0.05)
    store, q, session = FileStore(tmp_path / "sessions"), queue(), sid("pay")
    async with running_worker(temporal_client, store, {"mail": spec}, task_queue=q):
        ex = executor(temporal_client, q)
        asker = await new("mail", store=store, session_id=session, executor=ex)
        async for _ in (await asker.run("Pay them")).events():
            pass  # it parks: the calls wait in the store
        for call in calls:
            await asker.decide(call.id, True)
        # two processes, each opening the session after the turn was settled
        handles = [await new("mail", store=store, session_id=session, executor=ex, create=False)]
        handles.append(
            await new("mail", store=store, session_id=session, executor=ex, create=False)
        )
        console = Console(file=io.StringIO())
        streams = [await continuation(console, h) for h in handles]
        for stream in streams:
            async for _ in stream.events():
                pass
    assert sorted(PAID) == ["bob", "eve"], f"payments made: {PAID}"
    assert streams[0].run_id == streams[1].run_id
