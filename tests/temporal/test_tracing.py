"""OpenTelemetry tracing of runs: ``connect(..., interceptors=[...])`` with
``temporalio.contrib.opentelemetry``'s interceptor (the ``otel`` extra) gives one trace per run
holding the run's workflow span and its model, tool and store activity spans, exported here to
the SDK's in-memory exporter."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable_agent import Reply, ScriptedModel, new, tool
from durable_agent.ai import ModelRequest
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, connect, run_workflow_id
from durable_agent.workflows.tracing import tracing_interceptor
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, run_id, sid

pytestmark = pytest.mark.temporal


@tool
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def respond(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "user" and "weather" in last.text():
        return Reply.call("weather", {"city": "Oslo"}, id=f"call-{len(request.messages)}")
    return Reply(text=f"done after {len(request.messages)} messages")


def _by_trace(spans: Sequence[ReadableSpan]) -> dict[int, list[ReadableSpan]]:
    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        assert span.context is not None
        traces[span.context.trace_id].append(span)
    return traces


def _workflow_id(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get("temporalWorkflowID", ""))


def _run_trace(traces: dict[int, list[ReadableSpan]], wid: str) -> list[ReadableSpan]:
    """The one trace holding the run's workflow span (asserting there is exactly one)."""
    [trace] = [
        spans
        for spans in traces.values()
        if any(s.name == "RunWorkflow:durable_agent.run" and _workflow_id(s) == wid for s in spans)
    ]
    return trace


async def test_one_trace_per_run_with_model_tool_and_store_spans(address: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("durable-agent-test")
    client = await connect(address, interceptors=[tracing_interceptor(tracer)])
    store, q = MemoryStore(), queue()
    lm = ScriptedModel(respond)
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=(weather,))}, task_queue=q
    ):
        ex = executor(client, q)
        agent = await new("a", store=store, session_id=sid("otel"), executor=ex)
        first, second = run_id(), run_id()
        outcome = await consume(await agent.run("what's the weather?", run_id=first))
        assert outcome.error is None, repr(outcome.error)
        # a run started inside the application's own span (a request handler, say)
        with tracer.start_as_current_span("handle request") as request:
            outcome = await consume(await agent.run("thanks", run_id=second))
        assert outcome.error is None, repr(outcome.error)
    provider.force_flush()

    traces = _by_trace(exporter.get_finished_spans())
    one = _run_trace(traces, run_workflow_id(agent.session_id, first))
    two = _run_trace(traces, run_workflow_id(agent.session_id, second))
    assert one is not two
    names = [s.name for s in one]
    # rooted where the client started the run
    [root] = [s for s in one if s.parent is None]
    assert root.name == "StartWorkflow:durable_agent.run"
    # two model calls around one tool call, and the store activities
    assert names.count("RunActivity:durable_agent.call_model") == 2
    assert names.count("RunActivity:durable_agent.call_tool") == 1
    assert "RunActivity:durable_agent.load_path" in names
    assert names.count("RunActivity:durable_agent.append_entries") >= 1
    assert "CompleteWorkflow:durable_agent.run" in names
    assert {_workflow_id(s) for s in one} == {run_workflow_id(agent.session_id, first)}

    # inside the application's span everything of the run joins that trace; the client asks the
    # workflow nothing while the run goes on (its events come from the store)
    assert request.get_span_context().trace_id == two[0].context.trace_id
    names = [s.name for s in two]
    assert "RunActivity:durable_agent.call_model" in names
    assert not [n for spans in traces.values() for n in (s.name for s in spans) if "Query" in n]
    assert "RunActivity:durable_agent.append_entries" in names
    second_wid = run_workflow_id(agent.session_id, second)
    elsewhere = [
        s.name
        for spans in traces.values()
        if spans is not two
        for s in spans
        if _workflow_id(s) == second_wid
    ]
    assert elsewhere == [], f"spans of the second run outside its trace: {elsewhere}"
