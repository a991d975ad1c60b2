"""Continue-as-new forced every 2 turns: positions, receipts and the result stay continuous
(docs/design.md#receipts, docs/design.md#temporal)."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agent import Reply, ScriptedModel, new, tool
from durable_agent.stores import MemoryStore
from durable_agent.workflows import WORKFLOWS, AgentSpec, RunResult, run_workflow_id
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    assert_receipts_stored,
    consume,
    event_types,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
)

pytestmark = pytest.mark.temporal

TURNS = 6


@tool
async def count(n: int) -> str:
    """Count."""
    return f"counted {n}"


async def test_continue_as_new_every_two_turns(temporal_client: Client) -> None:
    script = [Reply.call("count", {"n": i}, id=f"c{i}") for i in range(1, TURNS + 1)]
    lm = ScriptedModel([*script, "all counted"])
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"counter": AgentSpec(model=lm, tools=[count])}, task_queue=q
    ):
        ex = executor(temporal_client, q, continue_as_new_after_turns=2)
        agent = await new("counter", store=store, session_id=sid("can"), executor=ex)
        rid = run_id()
        outcome = await consume(await agent.run("count to six", run_id=rid))
        assert outcome.error is None, repr(outcome.error)

        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, rid), result_type=RunResult
        )
        result = await handle.result()
        latest = await handle.fetch_history()
        positions = await _positions(temporal_client, agent.session_id, rid)

    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert len(stored) == 1 + 2 * TURNS + 1

    # the client saw every event: receipts for everything stored, in order, one chain
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    types = outcome.types()
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types.count("agent_start") == 1
    assert types.count("turn_start") == TURNS + 1 == types.count("turn_end")
    assert types.count("tool_execution_end") == TURNS
    assert outcome.messages == messages_of(stored)[1:]
    assert agent.leaf_id == stored[-1].id

    # positions 1..N without gaps, across the executions (live deltas have none: not recorded)
    assert positions == list(range(1, len(outcome.recorded_types()) + 1))

    # the result covers the whole run, not the last execution
    assert result.turn_count == TURNS + 1
    assert result.new_entry_ids == [e.id for e in stored]
    assert result.leaf_id == stored[-1].id
    assert result.usage.input > 0
    # agent_end reports the whole run too (as in-process), not only the last execution's part
    end = outcome.events[-1].agent
    assert end is not None and end.type == "agent_end"
    assert end.messages == outcome.messages
    assert end.usage == result.usage

    # the history shows the continue-as-new chain (TURNS + 1 model calls, every 2 turns)
    started = json.loads(latest.to_json())["events"][0]
    previous = started["workflowExecutionStartedEventAttributes"].get("continuedExecutionRunId")
    assert previous, "the last execution was not continued from another"
    earlier = await temporal_client.get_workflow_handle(
        run_workflow_id(agent.session_id, rid), run_id=previous
    ).fetch_history()
    assert event_types(earlier.to_json())[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW"
    executions = await _executions(temporal_client, agent.session_id, rid)
    assert executions == TURNS // 2 + 1

    # every execution replays deterministically from its history
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    for history in (earlier, latest):
        result_of_replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result_of_replay.replay_failure is None, result_of_replay.replay_failure


async def _positions(client: Client, session_id: str, rid: str) -> list[int]:
    """The positions the last execution still retains are the tail of 1..N (spot check)."""
    from durable_agent.activities.run_contracts import EventsAnswer

    handle = client.get_workflow_handle(run_workflow_id(session_id, rid))
    answer = await handle.query("events", 0, result_type=EventsAnswer)
    tail = [e.position for e in answer.events]
    assert tail == list(range(answer.first_position, answer.last_position + 1))
    assert answer.first_position > 1  # older events were dropped by continue-as-new
    return list(range(1, answer.last_position + 1))


async def _executions(client: Client, session_id: str, rid: str) -> int:
    """How many executions the chain has (walking continuedExecutionRunId back)."""
    wid = run_workflow_id(session_id, rid)
    run: str | None = None
    count = 0
    while True:
        history = await client.get_workflow_handle(wid, run_id=run).fetch_history()
        count += 1
        first = json.loads(history.to_json())["events"][0]
        run = first["workflowExecutionStartedEventAttributes"].get("continuedExecutionRunId")
        if not run:
            return count


async def test_a_client_reading_after_the_run_ended_gets_every_event_across_continue_as_new(
    temporal_client: Client,
) -> None:
    """A client that reads nothing until a run that continued as new every turn has ended still
    gets every event, each receipt once: they come from the store, which keeps them all
    (docs/design.md#receipts); no event can fall out of a window."""
    script = [Reply.call("count", {"n": i}, id=f"g{i}") for i in range(1, 5)]
    lm = ScriptedModel([*script, "done"])
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"counter": AgentSpec(model=lm, tools=[count])}, task_queue=q
    ):
        ex = executor(temporal_client, q, continue_as_new_after_turns=1)
        agent = await new("counter", store=store, session_id=sid("late"), executor=ex)
        rid = run_id()
        stream = await agent.run("count", run_id=rid)
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, rid), result_type=RunResult
        )
        result = await handle.result()  # the run finishes before the client reads anything
        outcome = await consume(stream)
        executions = await _executions(temporal_client, agent.session_id, rid)

    assert outcome.error is None, repr(outcome.error)
    assert executions == 5
    tool_turn = ["turn_start", "message_start", "message_end", "tool_execution_start"]
    tool_turn += ["tool_execution_end", "message_start", "message_end", "turn_end"]
    last = ["turn_start", "message_start", "message_end", "turn_end", "agent_end"]
    assert outcome.recorded_types() == ["agent_start", *tool_turn * 4, *last]
    stored = await store.load_entries(agent.session_id)
    assert len(stored) == 1 + 2 * 4 + 1
    assert result.new_entry_ids == [e.id for e in stored]
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    assert_receipts_stored(outcome, stored)
    assert_one_chain(stored)
    assert not agent.running


async def test_a_reset_of_a_continued_execution_reads_what_it_carries(
    temporal_client: Client,
) -> None:
    """The input of a continue-as-new carries ``resumed``, ``turn_count``, ... which a run's
    first input may not (docs/design.md#errors): a reset of a continued execution, whose start
    Temporal copies, is still read as continued, and retries it."""
    from tests.temporal.test_reset import reset, reset_result

    lm = ScriptedModel([Reply.call("count", {"n": 1}, id="r1"), "done", "done again"])
    store, q = MemoryStore(), queue()
    async with running_worker(
        temporal_client, store, {"counter": AgentSpec(model=lm, tools=[count])}, task_queue=q
    ):
        ex = executor(temporal_client, q, continue_as_new_after_turns=1)
        agent = await new("counter", store=store, session_id=sid("reset-can"), executor=ex)
        rid = run_id()
        assert (await consume(await agent.run("count", run_id=rid))).error is None
        wid = run_workflow_id(agent.session_id, rid)
        assert await _executions(temporal_client, agent.session_id, rid) == 2
        reset(temporal_client, wid, "--type", "FirstWorkflowTask")
        result = await reset_result(temporal_client, wid)
    assert result.status == "completed" and result.turn_count == 2, result
