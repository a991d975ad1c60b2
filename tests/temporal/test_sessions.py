"""Session-level behaviour on Temporal: orphan repair after a termination, sibling branches from
two handles and compaction through its workflow (docs/design.md#repair-and-reconcile,
docs/design.md#temporal, docs/design.md#compaction)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import pytest
from temporalio.client import Client, WorkflowFailureError

from durable_agent import (
    AgentError,
    CompactionEntry,
    Event,
    Reply,
    ScriptedModel,
    new,
    tool,
)
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.session import INTERRUPTED_TEXT, Entry, MessageEntry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import (
    AgentSpec,
    compact_workflow_id,
    publish_workflow_id,
    run_workflow_id,
)
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    assert_replays,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal


async def test_terminated_run_leaves_an_orphan_the_next_run_repairs(
    temporal_client: Client,
) -> None:
    gate, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def hang(n: int) -> str:
        """Blocks until the test releases it; the terminated run's heartbeat cancels it."""
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "too late"

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and last.text() == "start":
            return Reply.call("hang", {"n": 1}, id="call-h")
        return Reply(text=f"seen {len(request.messages)} messages")

    lm = ScriptedModel(respond)
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=lm, tools=[hang])}, task_queue=q
    ):
        agent = await new(
            "a", store=store, session_id=sid("orphan"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        stream = await agent.run("start", run_id=rid)
        seen = asyncio.create_task(consume(stream))
        await wait_state(
            temporal_client,
            agent.session_id,
            rid,
            lambda s: bool(s.pending_tool_calls),
            what="pending call",
        )
        await temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid)).terminate(
            reason="operator"
        )
        outcome = await asyncio.wait_for(seen, 20)
        # the tool never finishes (it would store its result: see test_run_start_reconcile)
        await asyncio.wait_for(cancelled.wait(), 20)
        gate.set()
        assert isinstance(outcome.error, AgentError) and "terminated" in str(outcome.error)
        assert not agent.running

        stored = await store.load_entries(agent.session_id)
        assert [m.role for m in messages_of(stored)] == ["user", "assistant"]  # the orphan
        assert agent.leaf_id == stored[-1].id
        # the model view already answers it (projection)
        assert [m.role for m in agent.messages()] == ["user", "assistant", "tool_result"]

        follow = await consume(await agent.run("carry on"))
        assert follow.error is None, repr(follow.error)
        await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))

    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    repair = stored[2]
    assert isinstance(repair, MessageEntry) and repair.synthetic
    assert repair.message.role == "tool_result" and repair.message.tool_call_id == "call-h"
    assert repair.message.text() == INTERRUPTED_TEXT and repair.message.is_error
    assert repair.message.timestamp == messages_of(stored)[1].timestamp
    assert [m.text() for m in messages_of(stored)[3:]] == ["carry on", "seen 4 messages"]
    # agent_start's receipt: the repair first, then the input
    start = follow.events[0]
    assert start.agent is not None and start.agent.type == "agent_start"
    assert [e.id for e in start.entries or []] == [stored[2].id, stored[3].id]
    assert [m.role for m in lm.requests[-1].messages] == [
        "user",
        "assistant",
        "tool_result",
        "user",
    ]


async def test_two_handles_grow_sibling_branches(temporal_client: Client) -> None:
    def respond(request: ModelRequest) -> Reply:
        return Reply(text=f"answer to {request.messages[-1].text()}")

    store, q = MemoryStore(), queue()
    session = sid("siblings")
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=ScriptedModel(respond))}, task_queue=q
    ):
        seed = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        await (await seed.run("seed")).wait()
        a = await new("a", store=store, session_id=session, executor=executor(temporal_client, q))
        b = await new("a", store=store, session_id=session, executor=executor(temporal_client, q))
        stream_a = await a.run("question a")
        stream_b = await b.run("question b")
        got_a, got_b = await asyncio.gather(stream_a.wait(), stream_b.wait())

    stored = await store.load_entries(session)
    assert len(stored) == 6
    seed_answer = stored[1]
    children = [e for e in stored if e.parent_id == seed_answer.id]
    assert len(children) == 2
    assert [m.text() for m in got_a] == ["answer to question a"]
    assert [m.text() for m in got_b] == ["answer to question b"]
    assert [m.text() for m in a.messages()] == [
        "seed",
        "answer to seed",
        "question a",
        "answer to question a",
    ]
    assert [m.text() for m in b.messages()] == [
        "seed",
        "answer to seed",
        "question b",
        "answer to question b",
    ]
    assert a.leaf_id != b.leaf_id


async def test_compaction_through_the_compact_workflow(temporal_client: Client) -> None:
    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1].text()
        if last.startswith("Summarize the conversation so far"):
            seen = " / ".join(m.text() for m in request.messages[:-1])
            return Reply(text=f"SUMMARY[{seen}]")
        return Reply(text=f"a:{last}")

    published: list[Event] = []
    lm = ScriptedModel(respond)
    store, q = MemoryStore(), queue()
    session = sid("compact")
    async with running_worker(
        temporal_client,
        store,
        {"a": AgentSpec(model=lm, tools=[], system_prompt="be brief")},
        task_queue=q,
        publisher=published.append,
    ):
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        for question in ("q1", "q2"):
            await (await agent.run(question)).wait()
        before = await store.load_entries(session)

        entry = await agent.compact(keep_turns=1)

        async def compacted() -> list[Event] | None:
            got = [e for e in published if e.type == "session_compacted"]
            return got or None

        events = await eventually(compacted, within=20, what="session_compacted")
        nothing = await agent.compact(keep_turns=5)  # fewer turns than kept: no-op
        after = await (await agent.run("q3")).wait()

    assert isinstance(entry, CompactionEntry)
    assert entry.summary == "SUMMARY[q1 / a:q1]"
    assert entry.first_kept_id == before[2].id  # q2
    assert entry.tokens_before > 0
    assert entry.parent_id == before[-1].id
    assert agent.leaf_id != entry.id  # q3 ran after it
    stored = await store.load_entries(session)
    assert stored[4].id == entry.id and stored[4] == entry
    assert [m.text() for m in after] == ["a:q3"]
    # the summarizer got the system prompt, no tools, and only the prefix
    summarize_request = next(
        r for r in lm.requests if r.messages[-1].text().startswith("Summarize the conversation")
    )
    assert summarize_request.system_prompt == "be brief" and summarize_request.tools == []
    # q3's model view starts from the summary
    assert lm.requests[-1].messages[0].text().startswith("SUMMARY[")
    assert [m.text() for m in lm.requests[-1].messages[1:]] == ["q2", "a:q2", "q3"]
    assert nothing is None
    # published once by the worker, with its idempotency key and the stored entry
    assert len(events) == 1
    (event,) = events
    assert event.session_id == session
    assert event.entries == [entry] and event.leaf_id == entry.id
    assert event.idempotency_key == f"session_compacted:{session}:{entry.id}"

    # two compact workflows (one a no-op), under their IDs
    async def listed() -> list[str] | None:
        query = f'WorkflowId STARTS_WITH "{compact_workflow_id(session, "")}"'
        ids = [w.id async for w in temporal_client.list_workflows(query)]
        return ids if len(ids) == 2 else None

    await eventually(listed, within=20, interval=0.2, what="the compact workflows")


async def test_client_verbs_publish_through_publish_workflows(temporal_client: Client) -> None:
    """new, branch and fork publish their lifecycle events via the worker's publisher, each
    occurrence once per idempotency key, a fork's two events in order (docs/design.md#receipts)."""
    published: list[Event] = []
    store, q = MemoryStore(), queue()
    session = sid("verbs")
    async with running_worker(
        temporal_client,
        store,
        {"a": AgentSpec(model=ScriptedModel(["one"]))},
        task_queue=q,
        publisher=published.append,
    ):
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        await (await agent.run("q")).wait()
        await agent.branch("")
        child = await agent.fork(f"{session}-child")

        async def all_four() -> list[Event] | None:
            return list(published) if len(published) >= 4 else None

        events = await eventually(all_four, within=20, what="four lifecycle events")
        # one publish workflow per verb, named by its first event's key (a fork's two share one)
        keys = [e.idempotency_key for e in events if not str(e.idempotency_key).endswith(":fork")]
        handles = [temporal_client.get_workflow_handle(publish_workflow_id(str(k))) for k in keys]
        for handle in handles:
            await handle.result()
        described = [await handle.describe() for handle in handles]

    by_type = {e.type: e for e in events}
    assert sorted(by_type) == ["session_branched", "session_forked", "session_init"]
    assert [e.type for e in events if e.session_id == child.session_id] == [
        "session_forked",
        "session_init",
    ]
    # publish workflows of different verbs run independently: only a fork's pair is ordered
    (init,) = [e for e in events if e.type == "session_init" and e.session_id == session]
    assert init.leaf_id == ""
    assert init.idempotency_key is not None
    assert init.idempotency_key.startswith(f"session_init:{session}:")
    branched = by_type["session_branched"]
    assert branched.from_id == agent.entries()[-1].id and branched.leaf_id == ""
    forked = by_type["session_forked"]
    assert forked.parent_id == session
    assert forked.idempotency_key == f"session_forked:{child.session_id}:{session}"
    child_init = [
        e for e in events if e.type == "session_init" and e.session_id == child.session_id
    ]
    assert [e.idempotency_key for e in child_init] == [f"session_init:{child.session_id}:fork"]
    assert len({e.idempotency_key for e in events}) == 4
    assert len(published) == 4  # each once
    assert [d.workflow_type for d in described] == ["durable_agent.publish"] * 3
    assert all(d.status is not None and d.status.name == "COMPLETED" for d in described)


async def test_a_second_fork_into_a_child_id_is_published_too(temporal_client: Client) -> None:
    """A fork that takes a child forked into before on to a longer path is another occurrence:
    its events reach the publisher with the child's new leaf (the publish workflow's ID was the
    first fork's, so Temporal refused it and the application never heard of it)."""
    published: list[Event] = []
    store, q = MemoryStore(), queue()
    session = sid("refork")
    child_id = f"{session}-child"
    async with running_worker(
        temporal_client,
        store,
        {"a": AgentSpec(model=ScriptedModel([]))},
        task_queue=q,
        publisher=published.append,
    ):
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        await agent.append("one")
        first = await agent.fork(child_id)
        await agent.append("two")
        longer = await agent.fork(child_id)  # the child goes on to the longer path

        async def inits() -> list[str] | None:
            found = [
                e.leaf_id or ""
                for e in published
                if e.type == "session_init" and e.session_id == child_id
            ]
            return found if len(found) >= 2 else None

        leaves = await eventually(inits, within=20, what="two forks' session_init")
    # each fork's pair is ordered, different forks' publish workflows are not
    assert sorted(leaves) == sorted([first.leaf_id, longer.leaf_id])
    assert len([e for e in published if e.type == "session_forked"]) == 2


class _GatedCommits(MemoryStore):
    """Holds the append of a compaction entry until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if any(isinstance(e, CompactionEntry) for e in entries):
            self.entered.set()
            await self.release.wait()
        await super().append_entries(session_id, entries)


@pytest.mark.parametrize("where", ["summarize", "commit"])
async def test_a_cancelled_compaction_leaves_the_handle_as_the_store(
    temporal_client: Client, where: str
) -> None:
    """Cancelling ``compact()`` cancels the compaction workflow and waits for its end: cut
    during the summary nothing is stored; cut during the commit the entry is stored and the
    handle has it. Either way a fresh load and the handle agree, and nothing lands later."""
    summarizing, release = asyncio.Event(), asyncio.Event()

    class Gated:
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            summary = request.messages[-1].text().startswith("Summarize")
            if summary and where == "summarize":
                summarizing.set()
                await release.wait()
            reply = "the summary" if summary else "an answer"
            async for event in ScriptedModel([reply]).stream(request):
                yield event

    store, q = _GatedCommits(), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=Gated())}, task_queue=q
    ):
        ex = executor(temporal_client, q)
        agent = await new("a", store=store, session_id=sid("cut"), executor=ex)
        for question in ("q1", "q2"):
            await (await agent.run(question)).wait()
        task = asyncio.create_task(agent.compact(keep_turns=1))
        await (summarizing if where == "summarize" else store.entered).wait()
        task.cancel()
        if where == "commit":
            store.release.set()  # the write in flight completes
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        store.release.set()
        query = f'WorkflowId STARTS_WITH "{compact_workflow_id(agent.session_id, "")}"'

        async def listed() -> list[str] | None:
            return [w.id async for w in temporal_client.list_workflows(query)] or None

        (wid,) = await eventually(listed, within=20, interval=0.2, what="the compact workflow")
        with contextlib.suppress(WorkflowFailureError):
            await temporal_client.get_workflow_handle(wid).result()  # it ended, or ends now
        stored = await store.load_entries(agent.session_id)
        fresh = await new("a", store=store, session_id=agent.session_id, executor=ex)
        assert not agent.running and agent.leaf_id == fresh.leaf_id == stored[-1].id
        assert agent.entries() == stored
        compacted = [e for e in stored if isinstance(e, CompactionEntry)]
        assert len(compacted) == (0 if where == "summarize" else 1)
        await agent.append("still usable")
