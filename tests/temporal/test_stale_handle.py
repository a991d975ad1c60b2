"""A handle whose stream broke while its run goes on stays busy until the run ends, then takes
its log and leaf from the store: a second run never branches from a stale leaf.

The stream breaks for real: the client's store (a real MemoryStore behind a wrapper; the worker
uses the store itself) starts failing its reads after the sequence number for good (a damaged
session, say) while the run goes on and continues as new.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import Reply, RunActiveError, ScriptedModel, new, tool
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.session import CorruptSessionError, Entry
from durable_agent.session.deltas import DeltaChannel
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


class BreakingStore(MemoryStore):
    """The client's view of ``store``: its reads after a seq fail for good once ``broken``."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__()
        self.store = store
        self.broken = False

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.store.load_entries(session_id)

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        if self.broken:
            raise CorruptSessionError(session_id, "damaged")
        return await self.store.load_entries_after(session_id, after, limit)

    async def append_entries(self, session_id: str, entries: Any) -> None:
        await self.store.append_entries(session_id, entries)

    async def create_session(self, session_id: str, parent_id: str | None = None) -> Any:
        return await self.store.create_session(session_id, parent_id)

    async def load_session(self, session_id: str) -> Any:  # the record a follower checks
        return await self.store.load_session(session_id)

    def live_deltas(self) -> Any:
        channel: DeltaChannel = self.store.live_deltas()
        return channel


async def test_a_broken_stream_keeps_the_handle_busy_then_resyncs(temporal_client: Client) -> None:
    lm, store, q = HeldModel(), MemoryStore(), queue()
    client_store = BreakingStore(store)
    async with running_worker(
        temporal_client, store, {"counter": AgentSpec(model=lm, tools=[count])}, task_queue=q
    ):
        ex = executor(temporal_client, q, continue_as_new_after_turns=1)
        agent = await new("counter", store=client_store, session_id=sid("stale"), executor=ex)
        start_leaf = agent.leaf_id
        client_store.broken = True  # the stream hears nothing of the run
        stream = await agent.run("count")
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(lm.reached.wait(), 30)  # 3 turns, 3 continue-as-new, held

        # the run goes on: the handle stays busy, no second run starts from its stale leaf
        assert agent.running
        assert agent.leaf_id == start_leaf
        with pytest.raises(RunActiveError):
            await agent.run("again")

        lm.release.set()
        outcome = await asyncio.wait_for(seen, 30)
        assert isinstance(outcome.error, CorruptSessionError), repr(outcome.error)
        client_store.broken = False

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
