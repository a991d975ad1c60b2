"""Queries and operations: ``state()``, ``events(after)``, the search attribute, workflow IDs,
attaching by run ID, UI-style starts and unknown agents (docs/design.md#temporal,
docs/design.md#receipts)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from durable_agent import AgentError, Reply, ScriptedModel, model, new, text
from durable_agent.activities.run_contracts import EventsAnswer, RunInput
from durable_agent.session import SessionNotFoundError
from durable_agent.stores import MemoryStore
from durable_agent.workflows import (
    SEARCH_ATTRIBUTE,
    AgentSpec,
    RunResult,
    run_workflow_id,
)
from durable_agent.workflows.executor import run_input_item
from tests.durable_runs.support import ONE_TOOL_TURN
from tests.support.gate_tool import GateTool
from tests.support.temporal import FAST, running_worker, temporal_binary
from tests.temporal.helpers import (
    RUN_TIMEOUT,
    assert_one_chain,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    run_state,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal


async def test_state_and_events_queries_during_a_run(temporal_client: Client) -> None:
    gate = GateTool()
    lm = ScriptedModel([Reply.call("gate", id="call-1"), "done"])
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client,
        store,
        {"gated": AgentSpec(model=lm, tools=[gate.tool])},
        task_queue=q,
    ):
        agent = await new(
            "gated", store=store, session_id=sid("state"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.create_task(consume(stream))

        state = await wait_state(
            temporal_client,
            agent.session_id,
            rid,
            lambda s: s.status == "running_tools" and bool(s.pending_tool_calls),
            what="running_tools",
        )
        stored = await store.load_entries(agent.session_id)
        assert [m.role for m in messages_of(stored)] == ["user", "assistant"]
        assert state.session_id == agent.session_id and state.run_id == rid
        assert state.leaf_id == stored[-1].id
        assert state.turn_count == 1
        assert [(c.id, c.name) for c in state.pending_tool_calls] == [("call-1", "gate")]
        assert state.new_entry_ids == [e.id for e in stored]
        assistant_usage = messages_of(stored)[1].usage
        assert assistant_usage is not None and state.usage == assistant_usage

        handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
        early = await handle.query("events", 0, result_type=EventsAnswer)
        early_positions = [e.position for e in early.events]
        assert early_positions == list(range(1, early.last_position + 1))
        # up to the gated tool's start
        assert [e.agent.type for e in early.events if e.agent] == ONE_TOOL_TURN[:5]

        gate.release.set()
        outcome = await asyncio.wait_for(seen, 30)
        assert outcome.error is None, repr(outcome.error)

        final = await run_state(temporal_client, agent.session_id, rid)
        everything = await handle.query("events", 0, result_type=EventsAnswer)
        after_three = await handle.query("events", 3, result_type=EventsAnswer)
        # an operator's query from the UI or CLI has no arguments: after defaults to 0
        no_args = await handle.query("events", result_type=EventsAnswer)
        assert no_args == everything
        past_end = await handle.query("events", everything.last_position, result_type=EventsAnswer)
        history = await handle.fetch_history()

    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert final.status == "completed"
    assert final.pending_tool_calls == []
    assert final.turn_count == 2
    assert final.new_entry_ids == [e.id for e in stored]
    assert final.leaf_id == stored[-1].id == agent.leaf_id

    # updates come from the live delta channel, never from the query
    recorded = [t for t in outcome.types() if t != "message_update"]
    positions = [e.position for e in everything.events]
    assert positions == list(range(1, len(recorded) + 1))
    assert [e.position for e in after_three.events] == positions[3:]
    assert past_end.events == []
    # what the client saw is what the query retains, in the same order
    assert [e.agent.type for e in everything.events if e.agent] == recorded
    assert recorded.count("message_update") == 0  # updates are not recorded

    # every activity, ordinary or local (a marker), has a readable summary in the UI
    events = json.loads(history.to_json())["events"]
    scheduled = [e for e in events if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"]
    local = [
        e
        for e in events
        if e.get("markerRecordedEventAttributes", {}).get("markerName") == "core_local_activity"
    ]
    assert scheduled and local
    for e in [*scheduled, *local]:
        assert e.get("userMetadata", {}).get("summary"), e

    def kind(e: dict[str, Any]) -> str:
        if "activityTaskScheduledEventAttributes" in e:
            return str(e["activityTaskScheduledEventAttributes"]["activityType"]["name"])
        data = e["markerRecordedEventAttributes"]["details"]["data"]["payloads"][0]["data"]
        return str(json.loads(base64.b64decode(data))["activity_type"])

    # and the stores say what they store
    store_summaries = [
        json.loads(base64.b64decode(e["userMetadata"]["summary"]["data"]))
        for e in [*scheduled, *local]
        if kind(e) == "durable_agent.append_entries"
    ]
    # model replies and a lone tool call's result are stored by their producing activity
    # (docs/design.md#stamps-and-producers): no append for them
    assert store_summaries == ["store input"]


async def test_search_attribute_lists_a_sessions_runs(
    temporal_client: Client, address: str
) -> None:
    lm = ScriptedModel(["one", "two"])
    store, q = MemoryStore(), queue()
    session = f"user-42-{uuid.uuid4().hex[:8]}"
    async with running_worker(temporal_client, store, {"plain": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "plain", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        rids = [run_id(), run_id()]
        for i, rid in enumerate(rids):
            outcome = await consume(await agent.run(f"q{i}", run_id=rid))
            assert outcome.error is None, repr(outcome.error)

        query = f'{SEARCH_ATTRIBUTE} = "{session}"'
        expected = {run_workflow_id(session, r) for r in rids}
        assert all(w.startswith(f"durable-agent/{session}/run/") for w in expected)

        async def listed() -> set[str] | None:
            ids = {w.id async for w in temporal_client.list_workflows(query)}
            return ids if expected <= ids else None

        await eventually(listed, within=20, interval=0.2, what="visibility")

        # the operator's command line sees the same
        cli = await asyncio.create_subprocess_exec(
            temporal_binary("temporal"),
            "workflow",
            "list",
            "--address",
            address,
            "--query",
            query,
            "--output",
            "jsonl",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(cli.communicate(), 30)
        assert cli.returncode == 0
        listed_by_cli = {
            json.loads(line)["execution"]["workflowId"]
            for line in out.decode().splitlines()
            if line
        }
        assert expected <= listed_by_cli


async def test_same_run_id_attaches_to_the_same_run(temporal_client: Client) -> None:
    gate = GateTool()
    lm = ScriptedModel([Reply.call("gate", id="c1"), "done"])
    store, q = MemoryStore(), queue()
    session = sid("attach")
    async with running_worker(
        temporal_client,
        store,
        {"gated": AgentSpec(model=lm, tools=[gate.tool])},
        task_queue=q,
    ):
        a = await new(
            "gated", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        b = await new(
            "gated", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        rid = run_id()
        first = asyncio.create_task(consume(await a.run("go", run_id=rid)))
        await wait_state(temporal_client, session, rid, lambda s: s.status == "running_tools")
        # a repeated start (same run ID) does not start a second run: it follows the first
        second = asyncio.create_task(consume(await b.run("ignored", run_id=rid)))
        gate.release.set()
        one, two = await asyncio.wait_for(asyncio.gather(first, second), 30)
        # and again after the run completed
        three = await consume(await a.run("ignored again", run_id=rid))

    for outcome in (one, two, three):
        assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(session)
    assert [m.role for m in messages_of(stored)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert messages_of(stored)[0].text() == "go"
    assert_one_chain(stored)
    assert one.recorded_types() == two.recorded_types() == three.recorded_types()
    assert (
        [e.id for e in one.receipts()] == [e.id for e in two.receipts()] == [e.id for e in stored]
    )
    assert one.messages == two.messages == three.messages
    assert a.leaf_id == b.leaf_id == stored[-1].id
    assert lm.remaining == 0 and len(lm.requests) == 2


async def test_ui_style_start_with_no_leaf_creates_the_session(temporal_client: Client) -> None:
    lm = ScriptedModel(["hello from the worker"])
    store, q = MemoryStore(), queue()
    session = sid("ui")
    async with running_worker(temporal_client, store, {"plain": AgentSpec(model=lm)}, task_queue=q):
        rid = run_id()
        handle = await temporal_client.start_workflow(
            "durable_agent.run",
            RunInput(
                session_id=session,
                run_id=rid,
                agent="plain",
                leaf_id=None,
                inputs=[run_input_item(text("hi"))],
                timeouts=FAST,
            ),
            id=run_workflow_id(session, rid),
            task_queue=q,
            result_type=RunResult,
            execution_timeout=RUN_TIMEOUT,
        )
        result = await handle.result()
        description = await handle.describe()

    stored = await store.load_entries(session)
    assert [m.text() for m in messages_of(stored)] == ["hi", "hello from the worker"]
    assert_one_chain(stored)
    assert result.status == "completed"
    assert result.new_entry_ids == [e.id for e in stored]
    assert result.turn_count == 1
    # an operator's start without search attributes still lists under the session
    from durable_agent.workflows.search import SESSION_ID_KEY

    assert description.typed_search_attributes.get(SESSION_ID_KEY) == session

    # a second UI start continues from the last appended entry
    lm2 = ScriptedModel(["again"])
    async with running_worker(
        temporal_client, store, {"plain": AgentSpec(model=lm2)}, task_queue=q
    ):
        rid2 = run_id()
        await temporal_client.execute_workflow(
            "durable_agent.run",
            RunInput(
                session_id=session,
                run_id=rid2,
                agent="plain",
                inputs=[run_input_item(text("more"))],
                timeouts=FAST,
            ),
            id=run_workflow_id(session, rid2),
            task_queue=q,
            result_type=RunResult,
            execution_timeout=RUN_TIMEOUT,
        )
    stored = await store.load_entries(session)
    assert [m.text() for m in messages_of(stored)] == [
        "hi",
        "hello from the worker",
        "more",
        "again",
    ]
    assert_one_chain(stored)
    assert len(lm2.requests[0].messages) == 3


async def test_unknown_agent_fails_the_run_before_any_write(temporal_client: Client) -> None:
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"known": AgentSpec(model=ScriptedModel(["x"]))}, task_queue=q
    ):
        agent = await new(
            "unknown", store=store, session_id=sid("unknown"), executor=executor(temporal_client, q)
        )
        outcome = await asyncio.wait_for(consume(await agent.run("hello")), 30)
        assert isinstance(outcome.error, AgentError)
        assert "unknown agent 'unknown'" in str(outcome.error)
        assert outcome.events == []
        with pytest.raises(SessionNotFoundError):  # the session was never created
            await store.load_entries(agent.session_id)
        assert agent.leaf_id == "" and not agent.running

        # UI-style start on an unknown session: nothing is created either
        session = sid("ui-unknown")
        rid = run_id()
        with pytest.raises(WorkflowFailureError):
            await temporal_client.execute_workflow(
                "durable_agent.run",
                RunInput(
                    session_id=session,
                    run_id=rid,
                    agent="nope",
                    inputs=[run_input_item(text("hi"))],
                    timeouts=FAST,
                ),
                id=run_workflow_id(session, rid),
                task_queue=q,
                result_type=RunResult,
                execution_timeout=timedelta(seconds=30),
            )

    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)


async def test_options_the_temporal_executor_refuses(temporal_client: Client) -> None:
    ex = executor(temporal_client, queue())
    with pytest.raises(ValueError):
        await new("a", store=MemoryStore(), executor=ex, publisher=print)
    with pytest.raises(TypeError):
        await new("a", store=MemoryStore(), executor=ex, tools=(GateTool().tool,))
    with pytest.raises(TypeError):
        # an in-process factory: the worker builds the agent, so only a registered name goes
        await new(model(ScriptedModel([])), store=MemoryStore(), executor=ex)


async def test_connect_from_env(address: str) -> None:
    from durable_agent.workflows import connect_from_env

    client = await connect_from_env({"TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": "default"})
    assert client.namespace == "default"
    assert await client.service_client.check_health()


def test_store_summaries_name_repair_and_cancellation() -> None:
    from durable_agent.activities.store_steps import store_summary
    from durable_agent.ai import Message, TextContent
    from durable_agent.session import MessageEntry

    def result(text: str) -> MessageEntry:
        message = Message(
            role="tool_result",
            content=[TextContent(text=text)],
            tool_call_id="c",
            tool_name="t",
            is_error=True,
        )
        return MessageEntry(message=message, synthetic=text.startswith("interrupted"))

    user = MessageEntry(message=Message(role="user", content=[TextContent(text="hi")]))
    repairs = [result("interrupted"), result("interrupted")]
    assert store_summary([*repairs, user]) == "store repair (2 calls) + input"
    assert store_summary([result("tool execution cancelled")]) == "store cancellation results"
    failed = result("tool execution failed: ValueError: no")
    assert store_summary([failed]) == "store tool failure results"
