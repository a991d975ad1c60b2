"""What an operator's ``temporal workflow reset`` of a run leaves in the session.

A reset is a **retry of that run from the leaf it started at**: what the run stored before the
reset point stays, everything after it is produced again under fresh entry IDs (Temporal gives
the reset execution a new random seed), so the retry grows a sibling branch and the original
entries are untouched. A reset of the session's latest run makes the retried branch the newest,
so a handle opened afterwards resumes on it, as after ``/retry``. When the session moved on since
the run ended (later runs, appends), the reset run ends by appending a small custom entry
(``durable_agent.reset``) under the session's newest entry, so the user's chat stays where it
was, and its result says so. Resets go through the bundled ``temporal`` CLI, as an operator
would run them.
"""

from __future__ import annotations

import asyncio
import subprocess

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent import Reply, ScriptedModel, new, text, tool
from durable_agent.activities.run_contracts import RunInput
from durable_agent.ai import ModelRequest
from durable_agent.session import CustomEntry, Entry, MessageEntry, Store, encode_entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, RunResult, run_workflow_id
from durable_agent.workflows.executor import run_input_item
from tests.support.temporal import FAST, running_worker, temporal_binary
from tests.temporal.helpers import (
    RUN_TIMEOUT,
    assert_one_chain,
    assert_replays,
    consume,
    executor,
    queue,
    run_id,
    sid,
)

pytestmark = pytest.mark.temporal


def respond(request: ModelRequest) -> Reply:
    return Reply(text=f"answer to {request.messages[-1].text()}")


def _text(entry: Entry) -> str:
    assert isinstance(entry, MessageEntry)
    return entry.message.text()


def reset(client: Client, workflow_id: str, *how: str) -> None:
    """``temporal workflow reset`` against the test server, as an operator types it."""
    address = client.service_client.config.target_host
    done = subprocess.run(
        [
            temporal_binary("temporal"),
            "workflow",
            "reset",
            "--address",
            address,
            "--namespace",
            client.namespace,
            "--workflow-id",
            workflow_id,
            "--reason",
            "operator retry",
            *how,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def reset_result(client: Client, workflow_id: str) -> RunResult:
    """The reset execution's result (the handle follows the workflow ID to its newest run)."""
    handle = client.get_workflow_handle(workflow_id, result_type=RunResult)
    result: RunResult = await asyncio.wait_for(handle.result(), 30)
    return result


async def two_turns(client: Client, store: Store, q: str) -> tuple[str, str, list[Entry]]:
    """A session with q1 then q2 asked through the library; returns (session, run 1 ID, entries)."""
    agent = await new("a", store=store, session_id=sid("reset"), executor=executor(client, q))
    first = run_id()
    for question, rid in (("q1", first), ("q2", None)):
        outcome = await consume(await agent.run(question, run_id=rid))
        assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert [_text(e) for e in stored] == ["q1", "answer to q1", "q2", "answer to q2"]
    return agent.session_id, first, stored


async def test_reset_of_an_old_run_keeps_the_session_where_it_was(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        session, first, before = await two_turns(temporal_client, store, q)
        wid = run_workflow_id(session, first)
        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

        stored = await store.load_entries(session)
        # the original four entries are untouched, byte for byte, and come first
        assert [encode_entry(e) for e in stored[:4]] == [encode_entry(e) for e in before]
        retried, marker = stored[4:6], stored[6]
        assert [_text(e) for e in retried] == ["q1", "answer to q1"]
        # a sibling of the original run's input: the same parent (run 1 started on the empty
        # leaf, so the retry is a second root), new IDs
        assert retried[0].parent_id == before[0].parent_id is None
        assert_one_chain(retried)
        assert {e.id for e in retried}.isdisjoint(e.id for e in before)
        assert result.status == "completed"
        assert result.new_entry_ids == [e.id for e in retried]
        assert result.leaf_id == retried[-1].id

        # the session had moved on (q2 came after run 1): the user's branch stays the active
        # one, held by a custom entry under its newest entry, and the result says so
        assert isinstance(marker, CustomEntry) and marker.kind == "durable_agent.reset"
        assert marker.parent_id == before[-1].id
        assert len(stored) == 7
        assert result.reset is not None
        assert result.reset.kept_leaf == before[-1].id
        assert result.reset.marker_id == marker.id
        reopened = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert reopened.leaf_id == marker.id
        assert [m.text() for m in reopened.messages()] == [
            "q1",
            "answer to q1",
            "q2",
            "answer to q2",
        ]


async def test_reset_of_the_latest_run_makes_its_retry_the_active_branch(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("reset-last"), executor=executor(temporal_client, q)
        )
        assert (await consume(await agent.run("q1"))).error is None
        last = run_id()
        assert (await consume(await agent.run("q2", run_id=last))).error is None
        before = await store.load_entries(agent.session_id)
        wid = run_workflow_id(agent.session_id, last)
        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)

        stored = await store.load_entries(agent.session_id)
        retried = stored[4:]
        assert [_text(e) for e in retried] == ["q2", "answer to q2"]
        assert retried[0].parent_id == before[1].id
        assert result.reset is not None and result.reset.kept_leaf == ""
        reopened = await new(
            "a", store=store, session_id=agent.session_id, executor=executor(temporal_client, q)
        )
        assert reopened.leaf_id == retried[-1].id


async def test_reset_of_a_run_started_if_unchanged_retries_it(temporal_client: Client) -> None:
    """A run started with ``if_unchanged`` (every run the HTTP API starts unless told otherwise)
    guards its input's append against another writer at its start; its reset is an operator's
    retry, whose input goes beside the original's though the session holds that now."""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("reset-guard"), executor=executor(temporal_client, q)
        )
        first = run_id()
        outcome = await consume(await agent.run("q1", run_id=first, if_unchanged=True))
        assert outcome.error is None, repr(outcome.error)
        wid = run_workflow_id(agent.session_id, first)
        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
        stored = await store.load_entries(agent.session_id)
        assert [_text(e) for e in stored] == ["q1", "answer to q1"] * 2
        assert stored[2].parent_id is None  # a second root, beside the original input
        assert result.new_entry_ids == [e.id for e in stored[2:]]


@tool
async def look(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def call_then_answer(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "user":
        return Reply.call("look", {"key": last.text()}, id=f"call-{last.text()}")
    return Reply(text=f"answer after {last.text()}")


async def scheduling_task(client: Client, workflow_id: str, activity_type: str) -> int:
    """The event ID of the completed workflow task that scheduled ``activity_type`` (first)."""
    last_completed = 0
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            last_completed = event.event_id
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == activity_type
        ):
            return last_completed
    raise AssertionError(f"{workflow_id} scheduled no {activity_type}")


async def test_reset_after_a_stored_reply_answers_its_call_again(
    temporal_client: Client,
) -> None:
    """Reset to the task that scheduled the tool: the input and the reply (stored before that
    point) stay shared, the tool call is answered again on a sibling branch. (Before
    ``local-store-v1`` the same held for a reset between the input's append and the model call;
    the input commit and the model call now share one workflow task.)"""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(call_then_answer)
    spec = AgentSpec(model=lm, tools=[look])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("reset-tool"), executor=executor(temporal_client, q)
        )
        first = run_id()
        assert (await consume(await agent.run("q1", run_id=first))).error is None
        before = await store.load_entries(agent.session_id)
        assert [_text(e) for e in before] == ["q1", "", "value of q1", "answer after value of q1"]
        wid = run_workflow_id(agent.session_id, first)
        point = await scheduling_task(temporal_client, wid, "durable_agent.call_tool")
        reset(temporal_client, wid, "--event-id", str(point))
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

    stored = await store.load_entries(agent.session_id)
    assert [encode_entry(e) for e in stored[:4]] == [encode_entry(e) for e in before]
    again = stored[4:]
    assert [_text(e) for e in again] == ["value of q1", "answer after value of q1"]
    # the reply stored before the reset point is shared: its call gets a second answer
    assert again[0].parent_id == before[1].id
    assert {e.id for e in again}.isdisjoint(e.id for e in before)
    assert_one_chain(again, root_parent=before[1].id)
    assert result.new_entry_ids == [before[0].id, before[1].id, *(e.id for e in again)]
    # the run was the session's latest: its retry is the active branch
    assert result.reset is not None and result.reset.kept_leaf == ""


async def test_reset_past_the_first_task_of_an_old_run_keeps_the_session_where_it_was(
    temporal_client: Client,
) -> None:
    """A reset point after the run's first workflow task (the reset is known from the
    reseeded randomness there): the session moved on, so its branch stays the active one."""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(call_then_answer)
    spec = AgentSpec(model=lm, tools=[look])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("reset-on"), executor=executor(temporal_client, q)
        )
        first = run_id()
        assert (await consume(await agent.run("q1", run_id=first))).error is None
        assert (await consume(await agent.run("q2"))).error is None
        before = await store.load_entries(agent.session_id)
        assert len(before) == 8
        wid = run_workflow_id(agent.session_id, first)
        point = await scheduling_task(temporal_client, wid, "durable_agent.call_tool")
        reset(temporal_client, wid, "--event-id", str(point))
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

    stored = await store.load_entries(agent.session_id)
    again, marker = stored[8:10], stored[10]
    assert [_text(e) for e in again] == ["value of q1", "answer after value of q1"]
    assert again[0].parent_id == before[1].id
    assert isinstance(marker, CustomEntry) and marker.parent_id == before[-1].id
    assert result.reset is not None
    assert (result.reset.kept_leaf, result.reset.marker_id) == (before[-1].id, marker.id)


async def test_reset_to_the_last_task_of_a_finished_run_stores_nothing(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        session, first, before = await two_turns(temporal_client, store, q)
        wid = run_workflow_id(session, first)
        reset(temporal_client, wid, "--type", "LastWorkflowTask")
        result = await reset_result(temporal_client, wid)

    assert [encode_entry(e) for e in await store.load_entries(session)] == [
        encode_entry(e) for e in before
    ]
    assert result.new_entry_ids == [before[0].id, before[1].id]
    assert len(lm.requests) == 2


async def test_reset_of_a_run_started_without_a_leaf_retries_from_where_it_started(
    temporal_client: Client,
) -> None:
    """A run started from the UI names no leaf (it continues the session's newest entry). Its
    reset must retry from the entry it continued then, not from whatever is newest now."""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    session = sid("reset-ui")
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        seed = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert (await consume(await seed.run("q0"))).error is None
        rid = run_id()
        wid = run_workflow_id(session, rid)
        await temporal_client.execute_workflow(
            "durable_agent.run",
            RunInput(
                session_id=session,
                run_id=rid,
                agent="a",
                leaf_id=None,
                inputs=[run_input_item(text("q1"))],
                timeouts=FAST,
            ),
            id=wid,
            task_queue=q,
            result_type=RunResult,
            execution_timeout=RUN_TIMEOUT,
        )
        later = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        assert (await consume(await later.run("q2"))).error is None
        before = await store.load_entries(session)
        assert [_text(e) for e in before] == [
            "q0",
            "answer to q0",
            "q1",
            "answer to q1",
            "q2",
            "answer to q2",
        ]

        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
        await assert_replays(temporal_client, wid)

    stored = await store.load_entries(session)
    assert [encode_entry(e) for e in stored[:6]] == [encode_entry(e) for e in before]
    retried, marker = stored[6:8], stored[8]
    assert [_text(e) for e in retried] == ["q1", "answer to q1"]
    # the session moved on (q2): its branch stays the active one
    assert isinstance(marker, CustomEntry) and marker.parent_id == before[-1].id
    # under q0's answer, where the run started, not under q2's answer (the newest entry now)
    assert retried[0].parent_id == before[1].id
    assert result.new_entry_ids == [e.id for e in retried]
    # the model saw the path the run started on: q0, its answer, q1
    assert [m.text() for m in lm.requests[-1].messages] == ["q0", "answer to q0", "q1"]
