"""Approvals and steering on Temporal: a wait that costs no activity and grows no history, days
long on the time-skipping server; the ``decide``/``send`` validators; races; an operator's plain
JSON update (docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from durable_agent import (
    Agent,
    ApprovalDecision,
    ApprovalNotPendingError,
    MessageEntry,
    PayloadTooLargeError,
    RunNotAcceptingError,
    ScriptedModel,
    new,
)
from durable_agent.activities.failures import agent_error
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.durable.limits import PAYLOAD_LIMIT
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from durable_agent.workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE
from tests.durable_runs.test_approvals import (
    DECIDED_TURN,
    SENT,
    Reader,
    email,
    send_email,
    shape,
    stored,
)
from tests.support.temporal import running_worker, temporal_binary
from tests.support.worker_process import AGENT, CALLS_LOG
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    activity_counts,
    assert_replays,
    event_types,
    executor,
    queue,
    run_state,
    wait_for_file,
    wait_state,
)

pytestmark = pytest.mark.temporal

THREE_DAYS = 3 * 24 * 3600.0


@contextlib.asynccontextmanager
async def agent_on(
    client: Client,
    script: list[Any],
    *,
    tools: tuple[Any, ...] = (send_email,),
    skipping: bool = False,
    **spec: Any,
) -> AsyncIterator[Agent]:
    store = MemoryStore()
    q = queue()
    lm = ScriptedModel(script)
    agents = {"a": AgentSpec(model=lm, tools=tools, **spec)}
    # the time-skipping test server cannot list search attributes: registered by the test
    extra = {"register_search_attribute": False} if skipping else {}
    async with running_worker(client, store, agents, task_queue=q, **extra):
        yield await new("a", store=store, executor=executor(client, q, execution_timeout=None))


async def history(client: Client, session_id: str, rid: str) -> str:
    h = await client.get_workflow_handle(run_workflow_id(session_id, rid)).fetch_history()
    return h.to_json()


async def test_three_day_wait_parks_then_a_decision_continues() -> None:
    """Time-skipping server: the wait is one timer (no activity, no heartbeat, no growth while
    nobody decides); after three days the run parks; a decision made after parking goes to the
    store, and ``run()`` continues from it."""
    async with skipping_server() as env:
        script = [Reply(tool_calls=[email()]), "sent it"]
        async with agent_on(env.client, script, approval_wait=THREE_DAYS, skipping=True) as agent:
            with env.auto_time_skipping_disabled():
                stream = await agent.run("mail bob")
                reader = Reader(stream)
                await reader.until("approval_requested")
                waiting = await run_state(env.client, agent.session_id, stream.run_id)
                assert waiting.status == "awaiting_approval"
                assert [p.tool_call_id for p in waiting.pending_approvals] == ["c1"]
                at_minute_zero = json.loads(
                    await history(env.client, agent.session_id, stream.run_id)
                )
            before = len(at_minute_zero["events"])
            await env.sleep(THREE_DAYS)  # the server skips three days at once
            assert await asyncio.wait_for(stream.wait(), 60)
            assert [p.tool_call_id for p in stream.pending] == ["c1"]
            text = await history(env.client, agent.session_id, stream.run_id)
            events = json.loads(text)["events"]
            timers = [e for e in events if e.get("timerStartedEventAttributes")]
            assert len(timers) == 1
            fire = timers[0]["timerStartedEventAttributes"]["startToFireTimeout"]
            assert float(fire.rstrip("s")) == THREE_DAYS
            # what the wait added: the timer firing and the workflow task that parked the run
            added = event_types(text)[before:]
            assert not [t for t in added if "ACTIVITY" in t], added
            assert added[0] == "EVENT_TYPE_TIMER_FIRED"
            assert added[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
            assert len(added) <= 5, added
            assert not any("heartbeat" in json.dumps(e).lower() for e in events[before:])
            counts = activity_counts(text)
            assert set(counts) <= {"durable_agent.call_model"} | {
                k for k in counts if k.startswith("local:")
            }
            # decided after the run parked: stored at the leaf, the next run continues
            decision = await agent.decide("c1", True, decided_by="ops")
            assert isinstance(decision, ApprovalDecision)
            continued = await agent.run()
            await asyncio.wait_for(continued.wait(), 60)
            assert shape(stored(agent)) == DECIDED_TURN


async def test_a_run_holding_a_message_does_not_park() -> None:
    """An accepted message is always delivered: a run that holds one when ``approval_wait`` runs
    out keeps waiting for the decisions instead of parking, then delivers it after the turn's
    results (the in-process twin is in tests/durable_runs/test_steering.py)."""
    async with skipping_server() as env:
        script = [Reply(tool_calls=[email()]), "sent it, and noted"]
        async with agent_on(env.client, script, approval_wait=THREE_DAYS, skipping=True) as agent:
            with env.auto_time_skipping_disabled():
                stream = await agent.run("mail bob")
                reader = Reader(stream)
                await reader.until("approval_requested")
                sending = asyncio.ensure_future(stream.send("cc alice too"))
                held = lambda s: s.queued_inputs == 1  # noqa: E731
                await wait_state(env.client, agent.session_id, stream.run_id, held)
            await env.sleep(2 * THREE_DAYS)  # past approval_wait: the timer fires
            text = await history(env.client, agent.session_id, stream.run_id)
            assert "EVENT_TYPE_TIMER_FIRED" in event_types(text)
            state = await run_state(env.client, agent.session_id, stream.run_id)
            assert state.status == "awaiting_approval" and state.queued_inputs == 1
            await agent.decide("c1", True, decided_by="ops")
            delivered = await asyncio.wait_for(sending, 60)
            await asyncio.wait_for(stream.wait(), 60)
            assert shape(stored(agent)) == [
                "user",
                "assistant",
                "approval_request",
                "approval_decision",
                "tool_result",
                "user",
                "assistant",
            ]
            assert stored(agent)[5].id == delivered.id
            assert stream.pending == []


@contextlib.asynccontextmanager
async def skipping_server() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server, with the search attributes a worker expects (the test
    server registers them but cannot list them)."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=temporal_binary("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
                    for name in (SEARCH_ATTRIBUTE, KIND_ATTRIBUTE)
                },
            )
        )
        yield env
    finally:
        await env.shutdown()


async def test_validators_refuse_with_no_history(temporal_client: Client) -> None:
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        wid = run_workflow_id(agent.session_id, stream.run_id)
        handle = temporal_client.get_workflow_handle(wid)
        # the requests are stored (and seen) before the workflow task that starts the wait's
        # timer completes: count the history once the run answers that it waits
        await wait_state(
            temporal_client,
            agent.session_id,
            stream.run_id,
            lambda s: s.status == "awaiting_approval",
        )
        before = len(event_types(await history(temporal_client, agent.session_id, stream.run_id)))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                "decide", {"tool_call_id": "nope", "approved": True}, id="decide:nope"
            )
        assert "nope" in str(refused.value.cause)
        after = len(event_types(await history(temporal_client, agent.session_id, stream.run_id)))
        assert after == before  # a refused update leaves no trace in history
        # an operator decides with plain JSON through the temporal CLI
        address = temporal_client.service_client.config.target_host
        done = await asyncio.to_thread(
            subprocess.run,
            [
                temporal_binary("temporal"),
                "workflow",
                "update",
                "execute",
                "--address",
                address,
                "--workflow-id",
                wid,
                "--name",
                "decide",
                "--update-id",
                "decide:c1",
                "--input",
                '{"tool_call_id": "c1", "approved": false, "reason": "ops says no"}',
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        events = await reader.done()
        assert "approval_decided" in [e.agent.type for e in events if e.agent]
        texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
        assert texts[2] == "tool call denied: ops says no"
        await assert_replays(temporal_client, wid)
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):  # ended: no more messages
            await handle.execute_update("send", {"text": "late"}, id="late")


@pytest.mark.parametrize(
    ("update", "body"),
    [
        ("send", {"text": "x" * (PAYLOAD_LIMIT + 1)}),
        # the validator let it through: storing it failed the update, and the run with it
        ("decide", {"tool_call_id": "c1", "approved": True, "args": {"to": "x" * PAYLOAD_LIMIT}}),
    ],
)
async def test_an_update_by_hand_over_the_payload_limit_is_refused_with_no_history(
    temporal_client: Client, update: str, body: dict[str, Any]
) -> None:
    """An operator's (or another client's) ``send`` or ``decide`` update is held to the payload
    limit as the HTTP API holds a message: the run would fail storing it. (Bodies it cannot
    use: :data:`BAD_BODIES`.)"""
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        before = event_types(await history(temporal_client, agent.session_id, stream.run_id))
        with pytest.raises(WorkflowUpdateFailedError) as failed:  # at once: refused
            await asyncio.wait_for(handle.execute_update(update, body, id="by-hand"), 30)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "PayloadTooLargeError"
        error = agent_error(cause)  # what the library's client raises
        assert isinstance(error, PayloadTooLargeError) and str(error) == cause.message
        after = event_types(await history(temporal_client, agent.session_id, stream.run_id))
        assert after == before
        await agent.decide("c1", True)
        await reader.done()
        assert shape(stored(agent)) == DECIDED_TURN


@pytest.mark.parametrize(
    "body",
    [
        {"tool_call_id": "c" * 1_000_000, "approved": True},
        {"tool_call_id": "c1", "approved": True, "x" * 1_000_000: 1},
    ],
    ids=["call-id", "field"],
)
async def test_a_decide_refusal_quotes_what_was_typed_short(
    temporal_client: Client, body: dict[str, Any]
) -> None:
    """A ``decide`` body with a call ID or a field name of 1 MB: its refusal quoted it whole,
    the update's failure as large as its body."""
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("decide", body, id="by-hand")
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError), cause
        assert len(cause.message) < 300 and "…" in cause.message, cause.message[:300]
        await agent.decide("c1", True)
        await reader.done()
        assert shape(stored(agent)) == DECIDED_TURN


async def test_two_deciders_one_wins(temporal_client: Client) -> None:
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        results = await asyncio.gather(
            agent.decide("c1", True, decided_by="alice"),
            agent.decide("c1", False, decided_by="bob"),
            return_exceptions=True,
        )
        won = [r for r in results if isinstance(r, ApprovalDecision)]
        lost = [r for r in results if isinstance(r, ApprovalNotPendingError)]
        assert len(won) == 1 and len(lost) == 1, results
        assert won[0].id in str(lost[0])
        await reader.done()
        decisions = [e for e in stored(agent) if isinstance(e, ApprovalDecision)]
        assert decisions == won


async def test_a_waiting_run_shows_queued_inputs_and_delivers_after_the_decision(
    temporal_client: Client,
) -> None:
    script = [Reply(tool_calls=[email()]), "done", "and the steer"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        sending = asyncio.ensure_future(stream.send("cc carol too"))
        await wait_state(
            temporal_client,
            agent.session_id,
            stream.run_id,
            lambda s: s.queued_inputs == 1,
            what="the steer queued",
        )
        assert not sending.done()  # delivered only after the decision
        await agent.decide("c1", True)
        steer = await asyncio.wait_for(sending, 30)
        await reader.done()
        assert shape(stored(agent)) == [
            "user",
            "assistant",
            "approval_request",
            "approval_decision",
            "tool_result",
            "user",
            "assistant",
        ]
        assert stored(agent)[5].id == steer.id


async def test_a_steer_as_the_run_completes_is_delivered_or_refused(
    temporal_client: Client,
) -> None:
    """Messages sent while a run ends: each is either stored (delivered, with a model call) or
    refused with RunNotAcceptingError; none is accepted and lost."""
    replies = [f"answer {i}" for i in range(40)]
    async with agent_on(temporal_client, replies, tools=()) as agent:
        stream = await agent.run("hi")
        outcomes: list[Any] = []
        while True:
            try:
                outcomes.append(await stream.send(f"more {len(outcomes)}", when="at_end"))
            except RunNotAcceptingError as exc:
                outcomes.append(exc)
                break
            if len(outcomes) > 5:
                break
        await asyncio.wait_for(stream.wait(), 60)
        delivered = [o for o in outcomes if isinstance(o, MessageEntry)]
        ids = {e.id for e in stored(agent)}
        assert all(d.id in ids for d in delivered)
        users = [
            e for e in stored(agent) if isinstance(e, MessageEntry) and e.message.role == "user"
        ]
        assert len(users) == 1 + len(delivered)
        assert stored(agent)[-1].message.role == "assistant"  # each one got its model call


@tool(approval=True)
async def slow_gate(x: int) -> str:
    """A tool a person approves."""
    return f"ran {x}"


async def test_state_lists_pending_and_cancel_keeps_requests(temporal_client: Client) -> None:
    calls = [ToolCall(id=f"g{i}", name="slow_gate", arguments={"x": i}) for i in (1, 2)]
    async with agent_on(temporal_client, [Reply(tool_calls=calls)], tools=(slow_gate,)) as agent:
        stream = await agent.run("two")
        reader = Reader(stream)
        await reader.until("approval_requested")
        state = await run_state(temporal_client, agent.session_id, stream.run_id)
        assert [p.tool_call_id for p in state.pending_approvals] == ["g1", "g2"]
        await agent.decide("g1", True)
        state = await wait_state(
            temporal_client,
            agent.session_id,
            stream.run_id,
            lambda s: len(s.pending_approvals) == 1,
        )
        assert state.status == "awaiting_approval"
        await stream.cancel()
        with contextlib.suppress(Exception):
            await reader.done()
        assert shape(stored(agent)) == [
            "user",
            "assistant",
            "approval_request",
            "approval_request",
            "approval_decision",
            "tool_result",
            "tool_result",
        ]
        texts = [e.message.text() for e in stored(agent)[5:]]
        assert texts == ["tool execution cancelled", "tool execution cancelled"]


async def test_a_wait_survives_its_worker_being_sigkilled(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """The worker dies while the run waits for a decision; the decision is sent with no worker
    up (the update waits for one), a fresh worker takes the run on, and the step runs once."""
    root, markers = tmp_path / "sessions", tmp_path / "markers"
    markers.mkdir()
    q = queue()
    common: tuple[str, ...] = ("--address", address, "--task-queue", q, "--root", str(root))
    common += ("--markers", str(markers), "--steps", "1", "--approval")
    first = worker_processes.start(*common)
    await wait_for_file(markers / f"ready-{first.pid}")
    agent = await new(AGENT, store=FileStore(root), executor=executor(temporal_client, q))
    stream = await agent.run("go")
    reader = Reader(stream)
    await reader.until("approval_requested")
    worker_processes.kill(first)
    deciding = asyncio.ensure_future(agent.decide("call-go-1", True))
    second = worker_processes.start(*common)
    await wait_for_file(markers / f"ready-{second.pid}")
    decision = await asyncio.wait_for(deciding, 60)
    await reader.done()
    stored_entries = await FileStore(root).load_entries(agent.session_id)
    kinds_stored = shape(list(stored_entries))
    assert kinds_stored == DECIDED_TURN
    assert stored_entries[3].id == decision.id
    calls = (markers / CALLS_LOG).read_text().split()
    assert calls.count("tool") == 1  # the approved step ran once
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, stream.run_id))


@pytest.mark.parametrize("delay", [0.0, 0.45, 0.5, 0.55])
async def test_a_decision_while_the_run_parks(temporal_client: Client, delay: float) -> None:
    """Whether the run takes the decision or has parked already, it is stored once, and the
    call runs once (in the run, or in the continuation ``run()``). ``delay`` moves the decision
    around the moment ``approval_wait`` runs out (a race injected, not a synchronisation)."""
    SENT.clear()
    script = [Reply(tool_calls=[email()]), "done", "done"]
    async with agent_on(temporal_client, script, approval_wait=0.5) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        await asyncio.sleep(delay)
        decision = await asyncio.wait_for(agent.decide("c1", True), 30)
        await reader.done()
        if stream.pending or not [e for e in stored(agent) if e.type == "message"][2:]:
            await asyncio.wait_for((await agent.run()).wait(), 30)
        decisions = [e for e in stored(agent) if isinstance(e, ApprovalDecision)]
        assert decisions == [decision]
        assert len(SENT) == 1
        assert shape(stored(agent))[:5] == [
            "user",
            "assistant",
            "approval_request",
            "approval_decision",
            "tool_result",
        ]


async def test_an_operator_run_with_input_on_a_parked_tail_is_refused(
    temporal_client: Client,
) -> None:
    """A run started by hand (no leaf) with new input while the session's calls wait for a
    decision fails as ``agent.run(...)`` refuses, before it stores anything: otherwise the input
    went in between the request and its decision, the calls' results after it, and the session's
    pending list came back empty while the run waited for them."""
    store, q = MemoryStore(), queue()
    lm = ScriptedModel([Reply(tool_calls=[email()]), "done"])
    agents = {"a": AgentSpec(model=lm, tools=(send_email,), approval_wait=0.1)}
    async with running_worker(temporal_client, store, agents, task_queue=q):
        agent = await new("a", store=store, executor=executor(temporal_client, q))
        await (await agent.run("Mail Bob.")).wait()  # parks: the call waits
        before = await store.load_entries(agent.session_id)
        handle = await temporal_client.start_workflow(
            "durable_agent.run",
            {"session_id": agent.session_id, "agent": "a", "text": "hi"},
            id=run_workflow_id(agent.session_id, "op-1"),
            task_queue=q,
        )
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 20)
        cause = info.value.cause
        assert isinstance(cause, ApplicationError) and cause.non_retryable
        assert cause.type == "ApprovalPendingError"
        assert "wait for a decision" in cause.message
        assert await store.load_entries(agent.session_id) == before
        again = await new(
            "a", store=store, session_id=agent.session_id, executor=executor(temporal_client, q)
        )
        assert [p.tool_call_id for p in again.pending_approvals()] == ["c1"]


NO_BODY = object()
"""An update sent with no argument (the UI's Data field left empty)."""
TWO_BODIES = object()
PLAIN_JSON = {"encoding": b"json/plain"}
"""An update sent with two arguments (``temporal workflow update execute --input A --input B``)."""
BAD_BODIES: list[tuple[str, Any, str]] = [
    ("decide", {"tool_call_id": "c1", "approved": "maybe"}, "approved: "),
    # lax, these read as a decision ("no" as a denial, 1 as an approval)
    (
        "decide",
        {"tool_call_id": "c1", "approved": "no"},
        "approved: Input should be a valid boolean",
    ),
    ("decide", {"tool_call_id": "c1", "approved": 1}, "approved: Input should be a valid boolean"),
    ("send", {"inputs": [{"role": "user", "content": "b", "meta": 1}]}, "inputs[0].meta: "),
    (
        "send",
        {"inputs": [{"role": "user", "content": "b", "ephemeral": "no"}]},
        "inputs[0].ephemeral: ",
    ),
    ("decide", {"tool_call_id": "c1"}, "approved: required"),
    ("decide", {"tool_call_id": "c1", "approved": True, "by": "ops"}, "by: "),
    ("decide", "c1", "expected a JSON object, got a string"),
    ("decide", NO_BODY, "none given"),
    ("decide", TWO_BODIES, "2 inputs given"),
    ("send", TWO_BODIES, "2 inputs given"),
    ("send", {"text": ""}, "text: is empty"),
    ("send", {"text": "   "}, "text: is empty"),
    ("send", {"text": "a", "when": "soon"}, "when: "),
    ("send", {}, "text or one"),
    ("send", {"inputs": [{"role": "user", "content": "b", "ephemeral": True}]}, "ephemeral"),
    ("send", {"inputs": [{"role": "user", "contnet": "b"}]}, "inputs[0].contnet: unknown"),
    ("send", {"inputs": [{"role": "user", "content": []}]}, "inputs[0].content: is empty"),
    ("send", {"inputs": [{"wire": "not an entry"}]}, "inputs[0].wire: "),
    # JSON no parser takes (a lone surrogate escape): pydantic's report was the message, a URL
    # on its last line
    ("send", RawValue(Payload(metadata=PLAIN_JSON, data=rb'{"text": "a\ud800"}')), "Invalid JSON"),
]


async def test_an_operators_bad_update_body_is_refused_typed_with_no_trace(
    temporal_client: Client,
) -> None:
    """Each body an operator can get wrong is refused by the validator, as one typed,
    non-retryable ``InvalidUpdateInput`` naming the field: no history, no workflow task failure
    (a plain-message ``inputs`` failed the task), no empty message queued for the model. The
    plain message form the run's own input takes is accepted."""
    script = [Reply(tool_calls=[email()]), "done"]
    async with agent_on(temporal_client, script) as agent:
        stream = await agent.run("mail bob")
        reader = Reader(stream)
        await reader.until("approval_requested")
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, stream.run_id)
        )
        for name, body, problem in BAD_BODIES:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                if body is NO_BODY:
                    await handle.execute_update(name)
                elif body is TWO_BODIES:
                    await handle.execute_update(name, args=[{"tool_call_id": "c1"}, {}])
                else:
                    await handle.execute_update(name, body)
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError), (name, body, cause)
            assert cause.type == "InvalidUpdateInput" and cause.non_retryable, (body, cause)
            assert cause.message.startswith(f"invalid {name} input: "), cause.message
            assert problem in cause.message, (body, cause.message)
            assert "\n" not in cause.message, cause.message  # one line, as the UI shows it
        await handle.execute_update(
            "send", {"inputs": [{"role": "user", "content": "cc carol"}], "answer": "accepted"}
        )
        await agent.decide("c1", True)
        await reader.done()
        types = event_types(await history(temporal_client, agent.session_id, stream.run_id))
        assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
        assert types.count("EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED") == 2
        texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
        assert texts[-3:] == ["sent to bob@example.com", "cc carol", "done"]
