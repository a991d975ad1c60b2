"""Run-start reconcile on Temporal (issue 11 item 8b): a write that lands after its run failed or
was terminated becomes part of the handle's path; repair answers only calls without a result."""

from __future__ import annotations

from temporalio.client import Client

from durable_agent import PersistError, Reply, ScriptedModel, new, tool
from durable_agent.session import INTERRUPTED_TEXT
from durable_agent.session.tree import path as tree_path
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.late_store import LateStore, is_tool_result, results_for
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import consume, executor, queue, sid

ONE_TRY = FAST.model_copy(update={"store_max_attempts": 1})
"""A store outage longer than the append's retry budget fails the run at once."""


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return text


async def test_a_tool_result_append_that_lands_after_the_run_failed_is_not_answered_twice(
    temporal_client: Client,
) -> None:
    inner = MemoryStore()
    late, q = LateStore(inner), queue()
    lm = ScriptedModel([Reply.call("echo", {"text": "ran"}, id="c1"), "after"])
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
    answers = results_for(stored, "c1")
    assert [a.message.text() for a in answers] == ["ran"]  # one result, the real one
    on_path = {e.id for e in tree_path(stored, agent.leaf_id)}
    assert answers[0].id in on_path
    assert INTERRUPTED_TEXT not in [m.text() for m in agent.messages()]
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    assert [m.text() for m in lm.requests[-1].messages if m.role == "tool_result"] == ["ran"]
