"""The run's store steps as local activities.

A one-turn run is one ordinary activity (its model call): the start (``load_path``) and the input
commit run as local activities inside the first workflow task. A query that arrives while one of
them runs makes the worker complete the task early to answer, so the run's commands spread over
two tasks; the run must still replay, and its receipts still name stored entries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from temporalio.client import Client

from durable_agent import ScriptedModel, new
from durable_agent.session.entries import Entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.temporal.helpers import (
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


class _GatedStore(MemoryStore):
    """A real MemoryStore whose next append, once armed, waits for the test to open the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if self.armed:
            self.armed = False
            self.entered.set()
            await self.gate.wait()
        await super().append_entries(session_id, entries)


def _history_shape(history_json: str) -> list[str]:
    """Workflow-task completions, markers and activities, in history order."""
    out = []
    for event in json.loads(history_json)["events"]:
        kind = event["eventType"]
        if kind == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED":
            out.append("task")
        elif kind == "EVENT_TYPE_MARKER_RECORDED":
            out.append(event["markerRecordedEventAttributes"]["markerName"])
        elif kind == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED":
            out.append(event["activityTaskScheduledEventAttributes"]["activityType"]["name"])
    return out


def _count(shape: Sequence[str], name: str) -> int:
    return sum(1 for s in shape if s == name)


async def test_a_query_during_the_run_start_is_answered_and_the_run_replays(
    temporal_client: Client,
) -> None:
    from tests.support.temporal import running_worker

    store, q = _GatedStore(), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=ScriptedModel(["hello"]))}, task_queue=q
    ):
        # the stream follows the store, never the workflow: the test's query is the only one
        # buffered while the start is held (the server buffers few)
        ex = executor(temporal_client, q)
        agent = await new("a", store=store, session_id=sid("split"), executor=ex)
        rid = run_id()
        store.armed = True  # the run's input commit (a local activity) waits at the gate
        stream = await agent.run("hi", run_id=rid)
        await store.entered.wait()
        handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
        # answered while the start is still held: the worker completed the task to answer it
        state = await handle.query("state")
        store.gate.set()
        outcome = await consume(stream)
        history = (await handle.fetch_history()).to_json()
    assert state["status"] == "persisting"  # the engine is committing the input
    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert [m.role for m in messages_of(stored)] == ["user", "assistant"]
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    shape = _history_shape(history)
    # the start's and the input's local activities landed in different workflow tasks, so
    # the model call was scheduled in a later task than the first local activity's (a patch
    # marker after a local activity would then fail the replay)
    first, second = [i for i, s in enumerate(shape) if s == "core_local_activity"]
    assert "task" in shape[first + 1 : second], shape
    assert _count(shape, "durable_agent.call_model") == 1
    assert _count(shape, "durable_agent.append_entries") == 0  # the input went locally
    await assert_replays(temporal_client, handle.id)


async def test_one_turn_run_is_one_activity_and_two_local_store_steps(
    temporal_client: Client,
) -> None:
    from tests.support.temporal import running_worker

    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=ScriptedModel(["one", "two"]))}, task_queue=q
    ):
        agent = await new(
            "a", store=store, session_id=sid("one"), executor=executor(temporal_client, q)
        )
        for text in ("first", "second"):
            rid = run_id()
            outcome = await consume(await agent.run(text, run_id=rid))
            assert outcome.error is None, repr(outcome.error)
            handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
            shape = _history_shape((await handle.fetch_history()).to_json())
            assert _count(shape, "core_local_activity") == 2, shape  # load_path + the input
            assert [s for s in shape if s.startswith("durable_agent.")] == [
                "durable_agent.call_model"
            ]
            # no patch marker: workflow code carries no patches (docs/design.md#versioning)
            assert _count(shape, "core_patch") == 0, shape
            await assert_replays(temporal_client, handle.id)
    stored = await store.load_entries(agent.session_id)
    assert [m.text() for m in messages_of(stored)] == ["first", "one", "second", "two"]
    assert_one_chain(stored)
