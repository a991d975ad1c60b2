"""A worker builds a model call's path from the entries it stored or loaded
(docs/design.md#worker-memory).

Loading and decoding the whole session in every ``call_model`` made each turn slower than the
last. The worker's store remembers what it stored (``RememberingStore``, whose own tests are in
``tests/test_remembering_store.py``); a first attempt reads the store only for a path it does not
know, and a retry still looks its stamp up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from durable_agent import Reply, ScriptedModel, ToolCall, new, tool
from durable_agent.activities import AgentActivities
from durable_agent.activities.contracts import AppendInput, CallModelInput
from durable_agent.ai import Message, TextContent
from durable_agent.ai.timefmt import utc_now
from durable_agent.durable.persist import Header
from durable_agent.session import Entry, MessageEntry
from durable_agent.session.codec import encode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, messages_of, queue, sid


class LoadCountingStore(MemoryStore):
    """A real MemoryStore that counts whole-session loads per activity type (``client``
    outside activities)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: Counter[str] = Counter()

    async def load_entries(self, session_id: str) -> list[Entry]:
        where = activity.info().activity_type if activity.in_activity() else "client"
        self.loads[where] += 1
        return await super().load_entries(session_id)


def entry(eid: str, parent: str | None, text: str = "hi") -> MessageEntry:
    return MessageEntry(
        id=eid,
        parent_id=parent,
        created_at=utc_now(),
        message=Message(role="user", content=[TextContent(text=text)]),
    )


async def test_a_first_attempt_reads_the_store_only_for_a_path_it_does_not_know() -> None:
    store = LoadCountingStore()
    await store.create_session("s1")
    lm = ScriptedModel(["one", "two"])
    activities = AgentActivities(store, {"a": AgentSpec(model=lm)})
    env = ActivityEnvironment()
    question = entry("q1", None, "question")
    await env.run(
        activities.append_entries, AppendInput(session_id="s1", entries=[encode_entry(question)])
    )
    stamp = Header(id="r1", parent_id="q1", created_at=utc_now())
    inp = CallModelInput(session_id="s1", leaf_id="q1", start_leaf_id="q1", agent="a", stamp=stamp)
    reply = await env.run(activities.call_model, inp)
    assert reply.entry is not None and reply.entry.message.text() == "one"
    assert sum(store.loads.values()) == 0
    assert [m.text() for m in lm.requests[0].messages] == ["question"]

    # another writer (a client, another worker) appends: that leaf is unknown, so it is loaded
    await store.append_entries("s1", [entry("q2", "r1", "follow-up")])
    stamp2 = Header(id="r2", parent_id="q2", created_at=utc_now())
    inp2 = CallModelInput(
        session_id="s1", leaf_id="q2", start_leaf_id="q2", agent="a", stamp=stamp2
    )
    await env.run(activities.call_model, inp2)
    assert sum(store.loads.values()) == 1
    assert [m.text() for m in lm.requests[1].messages] == ["question", "one", "follow-up"]
    assert [e.id for e in await store.load_entries("s1")] == ["q1", "r1", "q2", "r2"]


@tool
async def look(text: str) -> str:
    """Look something up."""
    return f"value of {text}"


@pytest.mark.temporal
async def test_a_run_of_tool_turns_loads_no_session_in_its_model_and_tool_calls(
    temporal_client: Client,
) -> None:
    calls = [
        Reply(tool_calls=[ToolCall(id=f"c{i}", name="look", arguments={"text": f"k{i}"})])
        for i in range(3)
    ]
    lm = ScriptedModel([*calls, "done"])
    store, q = LoadCountingStore(), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=lm, tools=[look])}, task_queue=q
    ):
        agent = await new(
            "a", store=store, session_id=sid("known"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))
    assert outcome.error is None, repr(outcome.error)
    assert store.loads["durable_agent.call_model"] == 0
    assert store.loads["durable_agent.call_tool"] == 0
    stored = await store.load_entries(agent.session_id)
    texts = [m.text() for m in messages_of(stored)]
    assert texts == [
        "go",
        "",
        "value of k0",
        "",
        "value of k1",
        "",
        "value of k2",
        "done",
    ]
    # every model call saw the whole path so far, exactly as a load would have built it
    seen: Sequence[int] = [len(r.messages) for r in lm.requests]
    assert seen == [1, 3, 5, 7]


async def test_known_entries_zero_loads_the_session_in_every_model_call() -> None:
    store = LoadCountingStore()
    await store.create_session("s1")
    await store.append_entries("s1", [entry("q1", None, "question")])
    lm = ScriptedModel(["one", "two"])
    activities = AgentActivities(store, {"a": AgentSpec(model=lm)}, known_entries=0)
    env = ActivityEnvironment()
    for n in (1, 2):
        stamp = Header(id=f"r{n}", parent_id="q1", created_at=utc_now())
        inp = CallModelInput(
            session_id="s1", leaf_id="q1", start_leaf_id="q1", agent="a", stamp=stamp
        )
        await env.run(activities.call_model, inp)
    assert sum(store.loads.values()) == 2
    assert [[m.text() for m in r.messages] for r in lm.requests] == [["question"], ["question"]]


def test_a_tools_spec_is_built_once() -> None:
    first = look.spec
    assert look.spec is first
    assert first.parameters["properties"]["text"]["type"] == "string"
