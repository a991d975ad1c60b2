"""Smoke: one run with a tool on the real Temporal dev server."""

from __future__ import annotations

import contextlib

from temporalio.client import Client

from durable_agent import tool
from durable_agent.ai import Reply
from durable_agent.stores import MemoryStore
from tests.support.temporal import TemporalHarness


@tool
async def echo(text: str) -> str:
    """Echo."""
    return text


async def test_one_tool_turn(temporal_client: Client) -> None:
    store = MemoryStore()
    async with contextlib.AsyncExitStack() as stack:
        h = TemporalHarness(temporal_client, stack)
        agent = await h.open(
            [Reply.call("echo", {"text": "hi"}, id="c1"), "done"], store=store, tools=[echo]
        )
        stream = await agent.run("go")
        types = []
        async for ev in stream.events():
            assert ev.agent is not None
            types.append((ev.agent.type, len(ev.entries) if ev.entries is not None else None))
        messages = await stream.wait()
        assert [m.role for m in messages] == ["assistant", "tool_result", "assistant"]
        stored = await store.load_entries(agent.session_id)
        assert len(stored) == 4
        assert agent.leaf_id == stored[-1].id
        print(types)
