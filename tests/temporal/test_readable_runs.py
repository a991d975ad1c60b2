"""What an operator reads of a client-started run in the Temporal UI: its input holds the
question as a plain message (no entry encoded as a JSON string), input and result hold no
``null`` fields, and the run's summary carries the first words of its question
(docs/design.md#temporal)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent import Reply, ScriptedModel, meta, new, tool
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, run_id, sid

pytestmark = pytest.mark.temporal

RESULT_FIELDS = {"status", "leaf_id", "new_entry_ids", "usage", "turn_count"}
"""The result's documented fields (README, "Starting a run by hand")."""
INPUT_FIELDS = {
    "session_id",
    "run_id",
    "agent",
    "leaf_id",
    "create_session",
    "inputs",
    "options",
    "timeouts",
}
"""What a client's run input may show; the fields continue-as-new carries are left out at their
start values."""


@tool
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def nulls(value: Any, where: str = "") -> list[str]:
    """Where ``value`` holds a ``null``."""
    if value is None:
        return [where or "."]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in nulls(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in nulls(v, f"{where}[{i}]")]
    return []


async def started_and_completed(client: Client, workflow_id: str) -> tuple[Any, Any]:
    """The run's input and result as the UI shows them (the JSON payloads)."""
    start = result = None
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            [payload] = event.workflow_execution_started_event_attributes.input.payloads
            start = json.loads(payload.data)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            [payload] = event.workflow_execution_completed_event_attributes.result.payloads
            result = json.loads(payload.data)
    return start, result


def ask_weather(request: Any) -> Reply:
    last = request.messages[-1]
    if last.role == "user":
        return Reply.call("weather", {"city": "Paris"}, id="call-1")
    return Reply(text=f"It is {last.text()}.")


async def test_a_client_run_reads_as_plain_json(temporal_client: Client) -> None:
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(ask_weather), tools=[weather])
    async with running_worker(temporal_client, store, {"assistant": spec}, task_queue=q):
        agent = await new(
            "assistant", store=store, session_id=sid("plain"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        question = "What is the weather in Paris?"
        outcome = await consume(await agent.run(question, meta("be brief"), run_id=rid))
        assert outcome.error is None, repr(outcome.error)
        start, result = await started_and_completed(
            temporal_client, run_workflow_id(agent.session_id, rid)
        )

    assert nulls(start) == [] and nulls(result) == []
    assert set(start) <= INPUT_FIELDS, sorted(set(start) - INPUT_FIELDS)
    first, second = start["inputs"]
    assert first["role"] == "user" and first["content"] == [{"type": "text", "text": question}]
    assert "wire" not in first and "ephemeral" not in first and "meta" not in first
    assert second["meta"] is True and second["content"][0]["text"] == "be brief"
    assert set(result) == RESULT_FIELDS
    assert result["status"] == "completed" and result["turn_count"] == 2
    # what the run stored is what the client asked, flags included
    stored = agent.entries()
    assert [getattr(e, "meta", None) for e in stored[:2]] == [False, True]


async def test_each_run_is_summarized_by_its_question(temporal_client: Client) -> None:
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(["one", "two"]))
    async with running_worker(temporal_client, store, {"assistant": spec}, task_queue=q):
        agent = await new(
            "assistant", store=store, session_id=sid("sum"), executor=executor(temporal_client, q)
        )
        summaries = []
        for question in (
            "Tell me a joke",
            "Summarize the quarterly sales report for the board, with every figure and a chart",
        ):
            rid = run_id()
            assert (await consume(await agent.run(question, run_id=rid))).error is None
            handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
            summaries.append(await (await handle.describe()).static_summary())
    joke, report = summaries
    assert joke is not None and report is not None
    assert "Tell me a joke" in joke
    assert "Summarize the quarterly sales report" in report and report.endswith("…")
    assert len(report) <= 80
