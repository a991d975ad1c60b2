"""Run-start reconcile on Temporal: a write that lands after its run failed or
was terminated becomes part of the handle's path; repair answers only calls without a result."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from durable_agent import (
    AgentError,
    MessageEntry,
    PersistError,
    Reply,
    ScriptedModel,
    ToolCall,
    new,
    tool,
)
from durable_agent.ai import ModelRequest
from durable_agent.session import INTERRUPTED_TEXT
from durable_agent.session.tree import path as tree_path
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.late_store import LateStore, is_tool_result, is_user, results_for
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_state,
)

ONE_TRY = FAST.model_copy(update={"store_max_attempts": 1})
"""A store outage longer than the append's retry budget fails the run at once."""


@tool(parallel_safe=True)
async def echo(text: str) -> str:
    """Echo the text."""
    return text


async def test_a_tool_result_append_that_lands_after_the_run_failed_is_not_answered_twice(
    temporal_client: Client,
) -> None:
    inner = MemoryStore()
    late, q = LateStore(inner), queue()
    # two parallel calls: the workflow appends their results in one batch
    calls = [ToolCall(id=f"c{i}", name="echo", arguments={"text": f"ran {i}"}) for i in (1, 2)]
    lm = ScriptedModel([Reply(tool_calls=calls), "after"])
    async with running_worker(
        temporal_client,
        late,
        {"a": AgentSpec(model=lm, tools=[echo])},
        task_queue=q,
    ):
        agent = await new(
            "a",
            store=inner,
            session_id=sid("late"),
            executor=executor(temporal_client, q, timeouts=ONE_TRY),
        )
        late.hold_next(is_tool_result)
        failed = await consume(await agent.run("go"))
        assert isinstance(failed.error, PersistError), repr(failed.error)
        await late.land()  # the timed-out append is applied after all

        follow = await consume(await agent.run("carry on"))
        assert follow.error is None, repr(follow.error)
    stored = await inner.load_entries(agent.session_id)
    first, second = results_for(stored, "c1"), results_for(stored, "c2")
    # one result each, the real ones: nothing repaired
    assert [a.message.text() for a in first + second] == ["ran 1", "ran 2"]
    on_path = {e.id for e in tree_path(stored, agent.leaf_id)}
    assert first[0].id in on_path and second[0].id in on_path
    assert INTERRUPTED_TEXT not in [m.text() for m in agent.messages()]
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    results = [m.text() for m in lm.requests[-1].messages if m.role == "tool_result"]
    assert results == ["ran 1", "ran 2"]


async def test_a_tool_that_commits_after_its_run_was_terminated_is_adopted_not_repaired(
    temporal_client: Client,
) -> None:
    gate, heard = asyncio.Event(), asyncio.Event()
    runs: list[int] = []

    @tool
    async def stubborn(n: int) -> str:
        """Finishes its work even when cancelled (a tool that cannot be interrupted)."""
        runs.append(n)
        while not gate.is_set():
            try:
                await gate.wait()
            except asyncio.CancelledError:
                heard.set()  # the terminated run's heartbeat cancels it; it carries on
        return "ran anyway"

    def respond(request: ModelRequest) -> Reply:
        if request.messages[-1].text() == "start":
            return Reply.call("stubborn", {"n": 1}, id="call-s")
        return Reply(text=f"seen {[m.text() for m in request.messages[1:]]}")

    inner, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(
        temporal_client, inner, {"a": AgentSpec(model=lm, tools=[stubborn])}, task_queue=q
    ):
        agent = await new(
            "a", store=inner, session_id=sid("term"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        seen = asyncio.create_task(consume(await agent.run("start", run_id=rid)))
        await wait_state(
            temporal_client, agent.session_id, rid, lambda s: bool(s.pending_tool_calls)
        )
        await temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid)).terminate(
            reason="operator"
        )
        outcome = await asyncio.wait_for(seen, 20)
        assert isinstance(outcome.error, AgentError) and "terminated" in str(outcome.error)
        await asyncio.wait_for(heard.wait(), 20)
        gate.set()

        async def landed() -> list[MessageEntry] | None:
            return results_for(await inner.load_entries(agent.session_id), "call-s") or None

        await eventually(landed, what="the tool result committed after the termination")
        follow = await consume(await agent.run("carry on"))
        assert follow.error is None, repr(follow.error)
    stored = await inner.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert [a.message.text() for a in results_for(stored, "call-s")] == ["ran anyway"]
    assert runs == [1]
    assert [m.text() for m in messages_of(stored)][2:] == [
        "ran anyway",
        "carry on",
        "seen ['', 'ran anyway', 'carry on']",
    ]
    assert [e.id for e in agent.entries()] == [e.id for e in stored]


async def test_an_input_append_that_lands_after_the_run_failed_joins_the_path(
    temporal_client: Client,
) -> None:
    """Not a tool result: the client learns the failed run's scheduled entry IDs from its
    history, and the next run start adopts the ones that landed."""
    inner = MemoryStore()
    late, q = LateStore(inner), queue()
    lm = ScriptedModel(["reply"])
    async with running_worker(temporal_client, late, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a",
            store=inner,
            session_id=sid("late-input"),
            executor=executor(temporal_client, q, timeouts=ONE_TRY),
        )
        late.hold_next(is_user)
        failed = await consume(await agent.run("first"))
        assert isinstance(failed.error, PersistError), repr(failed.error)
        await late.land()

        follow = await consume(await agent.run("second"))
        assert follow.error is None, repr(follow.error)
    stored = await inner.load_entries(agent.session_id)
    assert_one_chain(stored)  # "first" is not left a sibling of "second"
    assert [m.text() for m in messages_of(stored)] == ["first", "second", "reply"]
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
