"""A handle whose stream broke while its run goes on stays busy until the run ends, then takes
its log and leaf from the store: a second run never branches from a stale leaf.

The stream breaks for real: the client's ``events`` queries are held (a client interceptor,
the client is otherwise the real one) while the run continues-as-new past them, so the first
answer after the hold no longer retains what the client missed (EventGapError).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from durable_agent import EventGapError, Reply, RunActiveError, ScriptedModel, new, tool
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    consume,
    executor,
    messages_of,
    queue,
    sid,
)
from tests.temporal.query_gate import QueryGate

pytestmark = pytest.mark.temporal

HOLD_AT = 3
"""The model call after this many tool results waits for the test (the run goes on meanwhile)."""


class HeldModel:
    """Calls ``count`` until HOLD_AT results, then answers; the call after HOLD_AT results waits
    for ``release`` (signalling ``reached``)."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.inner = ScriptedModel(self._respond)

    @staticmethod
    def _done(request: ModelRequest) -> int:
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        return sum(1 for m in request.messages[last_user:] if m.role == "tool_result")

    def _respond(self, request: ModelRequest) -> Reply:
        done = self._done(request)
        if request.messages[-1].text() == "again":
            return Reply(text="again answered")
        if done < HOLD_AT:
            return Reply.call("count", {"n": done + 1}, id=f"c{done + 1}")
        return Reply(text="counted")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if self._done(request) == HOLD_AT:
            self.reached.set()
            await self.release.wait()
        async for event in self.inner.stream(request):
            yield event


@tool
async def count(n: int) -> str:
    """Count."""
    return f"counted {n}"


async def test_a_broken_stream_keeps_the_handle_busy_then_resyncs(temporal_client: Client) -> None:
    gate = QueryGate()
    gate.open.clear()  # the stream hears nothing until the run is three executions on
    client = gate.client(temporal_client)
    lm, store, q = HeldModel(), MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"counter": AgentSpec(model=lm, tools=[count])}, task_queue=q
    ):
        ex = executor(client, q, continue_as_new_after_turns=1)
        agent = await new("counter", store=store, session_id=sid("stale"), executor=ex)
        start_leaf = agent.leaf_id
        stream = await agent.run("count")
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(lm.reached.wait(), 30)  # 3 turns, 3 continue-as-new, held
        gate.open.set()
        await asyncio.wait_for(gate.answered.wait(), 30)  # the answer has a gap

        # the run goes on: the handle stays busy, no second run starts from its stale leaf
        assert agent.running
        assert agent.leaf_id == start_leaf
        with pytest.raises(RunActiveError):
            await agent.run("again")

        lm.release.set()
        outcome = await asyncio.wait_for(seen, 30)
        assert isinstance(outcome.error, EventGapError), repr(outcome.error)

        # re-synced from the store: log and leaf are what the run stored
        stored = await store.load_entries(agent.session_id)
        assert len(messages_of(stored)) == 1 + 2 * HOLD_AT + 1
        assert not agent.running
        assert agent.leaf_id == stored[-1].id
        assert [e.id for e in agent.entries()] == [e.id for e in stored]

        again = await consume(await agent.run("again"))
        assert again.error is None, repr(again.error)

    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)  # the second run continued the first: no entry has two children
    assert [m.text() for m in messages_of(stored)][-2:] == ["again", "again answered"]
