"""Producer-committed replies (docs/design.md#stamps-and-producers, docs/design.md#cancellation):
``call_model`` stores its own reply under the workflow's stamp, so a model turn costs one activity;
a retry whose stamp is stored makes no model call, and a zombie attempt that stored first wins."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Sequence

from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from durable_agent import Reply, ScriptedModel, Tool, ToolCall, new, tool
from durable_agent.activities import AgentActivities
from durable_agent.activities.contracts import CallModelInput, CallToolInput, ToolReply
from durable_agent.ai import RetryPolicy as ToolRetry
from durable_agent.ai.messages import TextContent, assistant_message
from durable_agent.ai.timefmt import utc_now
from durable_agent.durable.persist import Header
from durable_agent.session.entries import Entry, MessageEntry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    Outcome,
    activity_counts,
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
)


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return text


async def test_a_model_turn_is_one_activity_and_its_receipt_names_the_stored_reply(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel([Reply.call("echo", {"text": "hi"}, id="c1"), "done"])
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=lm, tools=[echo])}, task_queue=q
    ):
        agent = await new(
            "a", store=store, session_id=sid("one"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        outcome = await consume(await agent.run("go", run_id=rid))
        wid = run_workflow_id(agent.session_id, rid)
        history = (await temporal_client.get_workflow_handle(wid).fetch_history()).to_json()
    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert [m.role for m in messages_of(stored)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    assert agent.leaf_id == stored[-1].id
    counts = activity_counts(history)
    # two model turns and one tool leg, each one activity; the run's start and its input commit
    # are local activities (local-store-v1): no other activity task
    assert counts == {
        "durable_agent.call_model": 2,
        "durable_agent.call_tool": 1,
        "local:durable_agent.load_path": 1,
        "local:durable_agent.append_entries": 1,
    }, counts
    await assert_replays(temporal_client, wid)


class _CountingStore(MemoryStore):
    """A real MemoryStore that can let a zombie attempt win the race for the next append."""

    def __init__(self) -> None:
        super().__init__()
        self.zombie: MessageEntry | None = None

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        zombie, self.zombie = self.zombie, None
        if zombie is not None:
            await super().append_entries(session_id, [zombie])
        await super().append_entries(session_id, entries)


def _model_input(session_id: str, stamp: Header) -> CallModelInput:
    return CallModelInput(
        session_id=session_id, leaf_id="", start_leaf_id="", agent="a", stamp=stamp
    )


def _retry(env: ActivityEnvironment) -> ActivityEnvironment:
    """``env`` as the second attempt of the same activity (only a retry looks its stamp up)."""
    env.info = dataclasses.replace(env.info, attempt=2)
    return env


async def test_a_retry_whose_stamp_is_stored_makes_no_model_call() -> None:
    store = _CountingStore()
    await store.create_session("s1")
    lm = ScriptedModel(["first reply", "second reply"])
    activities = AgentActivities(store, {"a": AgentSpec(model=lm)})
    stamp = Header(id="0123456789abcdef", created_at=utc_now())
    env = ActivityEnvironment()
    first = await env.run(activities.call_model, _model_input("s1", stamp))
    again = await _retry(env).run(activities.call_model, _model_input("s1", stamp))
    assert len(lm.requests) == 1
    assert first.entry is not None and again.entry == first.entry
    assert first.entry.message.text() == "first reply"
    stored = await store.load_entries("s1")
    assert [e.id for e in stored] == [stamp.id]


async def test_a_zombie_that_stored_first_wins() -> None:
    store = _CountingStore()
    await store.create_session("s1")
    stamp = Header(id="fedcba9876543210", created_at=utc_now())
    store.zombie = MessageEntry(
        id=stamp.id,
        created_at=utc_now(),
        message=assistant_message(TextContent(text="the zombie's reply")),
    )
    lm = ScriptedModel(["the retry's reply"])
    activities = AgentActivities(store, {"a": AgentSpec(model=lm)})
    reply = await ActivityEnvironment().run(activities.call_model, _model_input("s1", stamp))
    stored = await store.load_entries("s1")
    assert len(stored) == 1
    assert isinstance(stored[0], MessageEntry)
    assert reply.entry is not None and reply.entry.message == stored[0].message
    assert reply.entry.message.text() == "the zombie's reply"


async def test_a_tool_whose_result_is_stored_never_runs_again() -> None:
    runs: list[str] = []

    @tool
    async def side_effect(text: str) -> str:
        """Counts its runs."""
        runs.append(text)
        return f"did {text}"

    store = MemoryStore()
    await store.create_session("s1")
    activities = AgentActivities(
        store, {"a": AgentSpec(model=ScriptedModel([]), tools=[side_effect])}
    )
    stamp = Header(id="00112233445566aa", created_at=utc_now())
    call = {"type": "tool_call", "id": "c1", "name": "side_effect", "arguments": {"text": "x"}}
    inp = CallToolInput(session_id="s1", agent="a", call=call, stamp=stamp)
    env = ActivityEnvironment()
    first = await env.run(activities.call_tool, inp)
    again = await _retry(env).run(activities.call_tool, inp)
    assert runs == ["x"]
    assert isinstance(first, ToolReply) and first.entry is not None and first == again
    stored = await store.load_entries("s1")
    assert [e.id for e in stored] == [stamp.id]
    assert isinstance(stored[0], MessageEntry) and stored[0].message == first.entry.message


async def _one_run(
    client: Client, lm: ScriptedModel, tools: list[Tool]
) -> tuple[list[Entry], Counter[str], Outcome]:
    store, q = MemoryStore(), queue()
    async with running_worker(client, store, {"a": AgentSpec(model=lm, tools=tools)}, task_queue=q):
        agent = await new("a", store=store, session_id=sid("tools"), executor=executor(client, q))
        rid = run_id()
        outcome = await consume(await agent.run("go", run_id=rid))
        wid = run_workflow_id(agent.session_id, rid)
        history = (await client.get_workflow_handle(wid).fetch_history()).to_json()
        await assert_replays(client, wid)
    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    assert agent.leaf_id == stored[-1].id
    return stored, activity_counts(history), outcome


def _calls(*texts: str) -> Reply:
    return Reply(
        tool_calls=[
            ToolCall(id=f"c{i}", name=name, arguments={"text": text})
            for i, (name, text) in enumerate((t.split(":") for t in texts), start=1)
        ]
    )


async def test_a_retried_tool_commits_its_result_once_in_its_own_activity(
    temporal_client: Client,
) -> None:
    runs: list[str] = []

    @tool(retry=ToolRetry(max_attempts=3, initial_interval=0.01))
    async def flaky(text: str) -> str:
        """Fails its first attempt."""
        runs.append(text)
        if len(runs) == 1:
            raise RuntimeError("transient")
        return f"did {text}"

    lm = ScriptedModel([_calls("flaky:x"), "done"])
    stored, counts, _ = await _one_run(temporal_client, lm, [flaky])
    assert runs == ["x", "x"]  # retried once by Temporal, within one activity
    assert [m.text() for m in messages_of(stored) if m.role == "tool_result"] == ["did x"]
    assert counts["durable_agent.call_tool"] == 1
    assert counts["local:durable_agent.append_entries"] == 1, counts  # the input only


async def test_sequential_calls_commit_their_own_results_in_call_order(
    temporal_client: Client,
) -> None:
    @tool(parallel_safe=False)
    async def step(text: str) -> str:
        """One step at a time."""
        return text

    lm = ScriptedModel([_calls("step:a", "step:b"), "done"])
    stored, counts, _ = await _one_run(temporal_client, lm, [step])
    results = [m for m in messages_of(stored) if m.role == "tool_result"]
    assert [(m.tool_call_id, m.text()) for m in results] == [("c1", "a"), ("c2", "b")]
    assert counts["durable_agent.call_tool"] == 2
    assert counts["local:durable_agent.append_entries"] == 1, counts


async def test_parallel_results_are_committed_after_the_batch_in_call_order(
    temporal_client: Client,
) -> None:
    """Parallel results are appended by the workflow in one batch once all calls finished (see
    ``_ActivityTools``): the slow first call still comes first in the chain."""
    release = asyncio.Event()

    @tool(parallel_safe=True)
    async def slow(text: str) -> str:
        """Waits for the fast call."""
        await release.wait()
        return f"slow {text}"

    @tool(parallel_safe=True)
    async def fast(text: str) -> str:
        """Lets the slow call finish."""
        release.set()
        return f"fast {text}"

    lm = ScriptedModel([_calls("slow:a", "fast:b"), "done"])
    stored, counts, _ = await _one_run(temporal_client, lm, [slow, fast])
    results = [m for m in messages_of(stored) if m.role == "tool_result"]
    assert [(m.tool_call_id, m.text()) for m in results] == [("c1", "slow a"), ("c2", "fast b")]
    assert counts["durable_agent.call_tool"] == 2
    assert counts["local:durable_agent.append_entries"] == 2, counts  # input + one for the batch
