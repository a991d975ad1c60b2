"""Errors a client hits on Temporal say what to do, and a run that cannot start creates nothing
(docs/design.md#errors)."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel, SessionNotFoundError, new, tool
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, sid

pytestmark = pytest.mark.temporal


@tool
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


async def test_tools_given_to_new_on_temporal_say_where_they_belong(
    temporal_client: Client,
) -> None:
    store = MemoryStore()
    with pytest.raises(
        TypeError, match=r"registered on the worker \(`AgentSpec\(tools=\.\.\.\)`\)"
    ):
        await new(
            "assistant",
            store=store,
            session_id="s-tools",
            executor=executor(temporal_client, queue()),
            tools=(weather,),
        )
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("s-tools")


async def test_a_run_for_an_unknown_agent_creates_no_session(temporal_client: Client) -> None:
    from durable_agent import UnknownAgentError

    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(["never"]))
    async with running_worker(temporal_client, store, {"assistant": spec}, task_queue=q):
        session = sid("nosuch")
        agent = await new(
            "nosuch", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("hi"))
        assert isinstance(outcome.error, UnknownAgentError), repr(outcome.error)
        assert "unknown agent 'nosuch' (this worker has: assistant)" in str(outcome.error)
        with pytest.raises(SessionNotFoundError):
            await store.load_entries(session)
        assert agent.entries() == [] and agent.leaf_id == ""

        # the same handle with a known agent: its first run creates the session
        known = await new(
            "assistant", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert (await consume(await known.run("hi"))).error is None
        assert len(await store.load_entries(session)) == 2


async def test_an_append_before_any_run_creates_the_session(temporal_client: Client) -> None:
    store = MemoryStore()
    session = sid("append")
    agent = await new(
        "assistant", store=store, session_id=session, executor=executor(temporal_client, queue())
    )
    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)
    [stored] = await agent.append("context")
    assert [e.id for e in await store.load_entries(session)] == [stored.id]
