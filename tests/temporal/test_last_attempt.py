"""A last attempt that stored its output and was then given up never contradicts what it stored
(docs/design.md#stamps-and-producers): the call's stored entry answers it.

The attempt's write lands, then the activity does not finish within its start-to-close timeout
(a slow store acknowledging late, with no crash at all): Temporal gives the call up with a
timeout, and it was the call's last allowed attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from temporalio import activity
from temporalio.client import Client

from durable_agent import PayloadTooLargeError, Reply, ScriptedModel, ToolCall, new, tool
from durable_agent.ai import TextContent, tool_result_message
from durable_agent.ai.tools import RetryPolicy
from durable_agent.durable.limits import PAYLOAD_LIMIT
from durable_agent.session import Entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.late_store import results_for
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import assert_one_chain, consume, executor, messages_of, queue, sid

pytestmark = pytest.mark.temporal


class LateAcks(MemoryStore):
    """A real MemoryStore whose first append inside activity ``kind`` lands and then is not
    acknowledged until the test releases it (after the activity was given up)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.landed = asyncio.Event()
        self.release = asyncio.Event()

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        await super().append_entries(session_id, entries)
        if (
            activity.in_activity()
            and activity.info().activity_type == self.kind
            and not self.landed.is_set()
        ):
            self.landed.set()
            await self.release.wait()


@tool(retry=RetryPolicy(max_attempts=1), timeout=1.5)
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_a_tool_result_stored_by_a_given_up_last_attempt_answers_its_call(
    temporal_client: Client,
) -> None:
    call = Reply(tool_calls=[ToolCall(id="c1", name="lookup", arguments={"key": "k"})])
    lm, q = ScriptedModel([call, "done"]), queue()
    store = LateAcks("durable_agent.call_tool")
    spec = AgentSpec(model=lm, tools=[lookup])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("late-tool"), executor=executor(temporal_client, q)
        )
        try:
            outcome = await consume(await agent.run("go"))
        finally:
            store.release.set()
    assert store.landed.is_set()
    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    [result] = results_for(stored, "c1")
    assert result.message.text() == "value of k"
    assert_one_chain(stored)
    assert [m.text() for m in messages_of(stored)] == ["go", "", "value of k", "done"]
    # the model was told what the tool answered
    assert lm.requests[1].messages[-1].text() == "value of k"


async def test_a_reply_stored_by_a_given_up_last_attempt_goes_on(temporal_client: Client) -> None:
    lm, q = ScriptedModel(["the answer"]), queue()
    store = LateAcks("durable_agent.call_model")
    timeouts = FAST.model_copy(update={"model_start_to_close": 1.5, "model_max_attempts": 1})
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=timeouts)
        agent = await new("a", store=store, session_id=sid("late-reply"), executor=ex)
        try:
            outcome = await consume(await agent.run("question"))
        finally:
            store.release.set()
    assert store.landed.is_set()
    assert outcome.error is None, repr(outcome.error)
    assert [m.text() for m in outcome.messages or []] == ["the answer"]
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert [m.text() for m in messages_of(stored)] == ["question", "the answer"]
    assert len(lm.requests) == 1


@tool(approval=True)
async def transfer(amount: int) -> str:
    """Moves money: a person approves it first."""
    return f"moved {amount}"


async def test_a_given_up_reply_that_asked_for_approval_still_waits(
    temporal_client: Client,
) -> None:
    """The reply stored by a given-up last attempt carried approval requests: the run takes them
    with the reply, waits for the decision and parks; the call never runs unapproved."""
    call = Reply(tool_calls=[ToolCall(id="t1", name="transfer", arguments={"amount": 5})])
    lm, q = ScriptedModel([call, "done"]), queue()
    store = LateAcks("durable_agent.call_model")
    timeouts = FAST.model_copy(update={"model_start_to_close": 1.5, "model_max_attempts": 1})
    spec = AgentSpec(model=lm, tools=[transfer], approval_wait=0.2)
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=timeouts)
        agent = await new("a", store=store, session_id=sid("late-ask"), executor=ex)
        try:
            stream = await agent.run("pay")
            outcome = await consume(stream)
        finally:
            store.release.set()
    assert store.landed.is_set()
    assert outcome.error is None, repr(outcome.error)
    assert [p.tool_call_id for p in stream.pending] == ["t1"]
    stored = await store.load_entries(agent.session_id)
    assert [e.type for e in stored] == ["message", "message", "custom"]
    assert results_for(stored, "t1") == []  # not run, not answered
    assert len(lm.requests) == 1


def _near_limit_text() -> int:
    """Text length whose tool result message is just under the payload limit, while the
    result's stored entry (message plus header) is over it."""
    probe = tool_result_message("p1", "sized", TextContent(text=""))
    room = PAYLOAD_LIMIT - len(probe.model_dump_json().encode())
    return room - 20  # the timestamp's digits vary by a few bytes; the header adds ~100


@tool
async def sized(n: int) -> str:
    """Returns ``n`` bytes."""
    return "r" * n


async def test_a_parallel_result_over_the_limit_with_its_header_is_answered_and_the_batch_stored(
    temporal_client: Client,
) -> None:
    calls = [
        ToolCall(id="p1", name="sized", arguments={"n": _near_limit_text()}),
        ToolCall(id="p2", name="sized", arguments={"n": 5}),
    ]
    lm, q, store = ScriptedModel([Reply(tool_calls=calls), "done"]), queue(), MemoryStore()
    spec = AgentSpec(model=lm, tools=[sized])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("near"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))
    # answered like a lone call: the run fails at the end of the turn, every call answered
    assert isinstance(outcome.error, PayloadTooLargeError), repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    [over] = results_for(stored, "p1")
    assert over.message.is_error
    assert over.message.text().startswith("tool execution failed: PayloadTooLargeError: ")
    [small] = results_for(stored, "p2")
    assert small.message.text() == "rrrrr"
    assert_one_chain(stored)
