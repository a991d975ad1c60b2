"""Every message size up to the documented limit passes through a run, continue-as-new and the event
stream; just over it raises PayloadTooLargeError and stores nothing of it
(docs/design.md#bounded-history)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from durable_agent import (
    CustomEntry,
    Event,
    PayloadTooLargeError,
    Reply,
    ScriptedModel,
    ToolCall,
    model,
    new,
    tool,
)
from durable_agent.activities.run_contracts import EventsAnswer
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.durable.limits import PAYLOAD_LIMIT, TEMPORAL_BLOB_LIMIT
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, RunResult, run_workflow_id
from tests.durable_runs.test_approvals import email, send_email
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    assert_receipts_stored,
    consume,
    executor,
    hydrate,
    messages_of,
    queue,
    run_id,
    sid,
)

pytestmark = pytest.mark.temporal

SIZES = [100_000, 600_000, 1_000_000, 1_400_000]
"""Message sizes in bytes, the largest close under the 1.5 MiB limit."""

CARRIED_BOUND = 16_000
"""The continue-as-new input stays a few KB whatever the message size."""


def _walker() -> ScriptedModel:
    """Turn k: an assistant message of SIZES[k] bytes calling ``blob`` for as many; then done."""

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1].text()
        if last == "over the limit":
            return Reply(text="o" * (PAYLOAD_LIMIT + 1), chunk_size=PAYLOAD_LIMIT * 2)
        if last == "tool over the limit":
            return Reply.call("blob", {"size": PAYLOAD_LIMIT + 1}, id="over")
        done = sum(1 for m in request.messages if m.role == "tool_result")
        if done >= len(SIZES) or last == "small":
            return Reply(text="walked")
        size = SIZES[done]
        return Reply(
            text="a" * size,
            tool_calls=[ToolCall(id=f"w{done}", name="blob", arguments={"size": size})],
            chunk_size=2 * size,
        )

    return ScriptedModel(respond)


@tool
async def blob(size: int) -> str:
    """Returns ``size`` bytes."""
    return "b" * size


def _can_input_sizes(history_json: str) -> list[int]:
    """Decoded sizes of the continue-as-new inputs in one execution's history."""
    sizes = []
    for event in json.loads(history_json)["events"]:
        attrs = event.get("workflowExecutionContinuedAsNewEventAttributes")
        if attrs:
            payloads = attrs["input"]["payloads"]
            sizes.append(sum(len(base64.b64decode(p["data"])) for p in payloads))
    return sizes


async def _chain_can_sizes(client: Client, session_id: str, rid: str) -> list[int]:
    """The continue-as-new input sizes of every execution of one run, oldest first."""
    wid = run_workflow_id(session_id, rid)
    run: str | None = None
    sizes: list[int] = []
    while True:
        history = (await client.get_workflow_handle(wid, run_id=run).fetch_history()).to_json()
        sizes = _can_input_sizes(history) + sizes
        first = json.loads(history)["events"][0]
        run = first["workflowExecutionStartedEventAttributes"].get("continuedExecutionRunId")
        if not run:
            return sizes


async def test_message_sizes_up_to_the_limit_pass_run_continue_as_new_and_stream(
    temporal_client: Client,
) -> None:
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=_walker(), tools=[blob])
    async with running_worker(temporal_client, store, {"walker": spec}, task_queue=q):
        # continue-as-new after turns 2 (600 KB) and 4 (1.4 MB)
        ex = executor(temporal_client, q, continue_as_new_after_turns=2)
        agent = await new("walker", store=store, session_id=sid("walk"), executor=ex)
        rid = run_id()
        outcome = await consume(await agent.run("walk the sizes", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
        handle = temporal_client.get_workflow_handle(
            run_workflow_id(agent.session_id, rid), result_type=RunResult
        )
        result = await handle.result()
        can_sizes = await _chain_can_sizes(temporal_client, agent.session_id, rid)
        answer = await handle.query("events", 0, result_type=EventsAnswer)

        # just over the limit: typed, and nothing of the oversized message is stored
        for prompt, roles in {
            "over the limit": ["user"],
            "tool over the limit": ["user", "assistant", "tool_result"],
        }.items():
            before = await store.load_entries(agent.session_id)
            over = await consume(await agent.run(prompt))
            assert isinstance(over.error, PayloadTooLargeError), (prompt, repr(over.error))
            added = messages_of((await store.load_entries(agent.session_id))[len(before) :])
            assert [m.role for m in added] == roles, prompt
            assert all(len(m.model_dump_json()) < 10_000 for m in added), prompt
            assert not agent.running
            assert agent.leaf_id == (await store.load_entries(agent.session_id))[-1].id
        last = await consume(await agent.run("small"))
        assert last.error is None, repr(last.error)

    stored = (await store.load_entries(agent.session_id))[: len(result.new_entry_ids)]
    assert [e.id for e in stored] == result.new_entry_ids
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    texts = [m.text() for m in messages_of(stored)]
    expected = ["walk the sizes"]
    for size in SIZES:
        expected += ["a" * size, "b" * size]
    assert texts == [*expected, "walked"]  # every message stored whole
    assert outcome.messages == messages_of(stored)[1:]

    # the stream delivered every body whole, however it travelled
    seen: dict[str, list[int]] = {}
    for event in outcome.events:
        inner = event.agent
        assert inner is not None
        if inner.type == "message_start" and inner.message and inner.message.role == "assistant":
            continue  # a reply's message_start is sent when its call is scheduled: empty
        body = inner.message or inner.result
        if body is not None:
            seen.setdefault(inner.type, []).append(len(body.text()))
        if inner.type == "tool_execution_start":
            assert inner.args is not None
            seen.setdefault("args", []).append(inner.args["size"])
    assert seen["tool_execution_end"] == SIZES
    assert seen["message_start"] == SIZES  # the results'
    assert seen["message_end"] == [n for size in SIZES for n in (size, size)] + [len("walked")]
    assert seen["turn_end"] == [*SIZES, len("walked")]
    assert seen["args"] == SIZES
    assert outcome.types().count("agent_end") == 1

    # continue-as-new carried positions and IDs only
    assert len(can_sizes) == 2
    assert max(can_sizes) < CARRIED_BOUND, can_sizes
    # and a query answer stays far from Temporal's limit
    assert len(answer.model_dump_json().encode()) < TEMPORAL_BLOB_LIMIT // 2


class _HeldTurns:
    """One tool turn with a 3 KB reply and a 5 KB result, then an answer; each model call
    waits for its ``release`` event after setting its ``reached`` one."""

    def __init__(self) -> None:
        self.reached = [asyncio.Event(), asyncio.Event()]
        self.release = [asyncio.Event(), asyncio.Event()]
        self.inner = ScriptedModel(self._respond)

    @staticmethod
    def _respond(request: ModelRequest) -> Reply:
        if any(m.role == "tool_result" for m in request.messages):
            return Reply(text="done")
        call = ToolCall(id="big1", name="blob", arguments={"size": 5000})
        return Reply(text="x" * 3000, tool_calls=[call], chunk_size=10_000)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        turn = 1 if any(m.role == "tool_result" for m in request.messages) else 0
        self.reached[turn].set()
        await self.release[turn].wait()
        async for event in self.inner.stream(request):
            yield event


async def test_events_carried_across_continue_as_new_read_back_whole(
    temporal_client: Client,
) -> None:
    """Continue-as-new carries the last turn's events with their bodies left out; an operator's
    ``events`` query on the new execution names the stored entries, which put them back whole,
    and the client's own stream (from the store) has every body whole too."""
    lm, store, q = _HeldTurns(), MemoryStore(), queue()
    for event in lm.release:
        event.set()
    async with running_worker(
        temporal_client, store, {"held": AgentSpec(model=lm, tools=[blob])}, task_queue=q
    ):
        ex = executor(temporal_client, q, continue_as_new_after_turns=1)
        agent = await new("held", store=store, session_id=sid("carry"), executor=ex)
        rid = run_id()
        outcome = await consume(await agent.run("go", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
        handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
        answer = await handle.query("events", 0, result_type=EventsAnswer)
        can_sizes = await _chain_can_sizes(temporal_client, agent.session_id, rid)

    stored = await store.load_entries(agent.session_id)
    reply, result, last = messages_of(stored)[1:]
    recorded = [hydrate(w, {e.id: e for e in stored}) for w in answer.events]

    for seen in (outcome.events, recorded):

        def of(kind: str, events: list[Event] = seen) -> list[Event]:
            return [e for e in events if e.agent is not None and e.agent.type == kind]

        assert [e.agent.message for e in of("message_end") if e.agent][-3:] == [reply, result, last]
        assert [e.agent.args for e in of("tool_execution_start") if e.agent] == [{"size": 5000}]
        assert [e.agent.result for e in of("tool_execution_end") if e.agent] == [result]
        assert [e.agent.message for e in of("turn_end") if e.agent] == [reply, last]
    receipts = [[x.id for x in e.entries] for e in outcome.events if e.entries]
    assert receipts == [[entry.id] for entry in stored]
    assert agent.leaf_id == stored[-1].id
    assert len(can_sizes) == 1 and can_sizes[0] < 6000, can_sizes  # the 8 KB turn stays out


async def test_an_answer_from_position_zero_stays_under_the_sdk_warning_size(
    temporal_client: Client,
) -> None:
    """A finished run whose events hold about 1.2 MB of inline bodies: ``events(0)`` answers in
    pieces of at most ``QUERY_BUDGET`` (under the SDK's 512 KiB warning), each starting where
    the last ended, together every recorded event once."""
    size = 100_000  # under QUERY_INLINE_LIMIT: the bodies travel inline
    replies = [
        Reply(
            text="t" * size,
            tool_calls=[ToolCall(id=f"c{k}", name="blob", arguments={"size": 10})],
            chunk_size=2 * size,
        )
        for k in range(4)
    ]
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel([*replies, "done"]), tools=[blob])
    async with running_worker(temporal_client, store, {"big": spec}, task_queue=q):
        agent = await new(
            "big", store=store, session_id=sid("pieces"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        outcome = await consume(await agent.run("go", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
        handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
        pieces: list[EventsAnswer] = []
        after = 0
        while True:
            answer = await handle.query("events", after, result_type=EventsAnswer)
            if not answer.events:
                break
            pieces.append(answer)
            after = answer.events[-1].position
    assert len(pieces) >= 2  # ~1.2 MB of bodies does not fit one answer
    for answer in pieces:
        assert len(answer.model_dump_json().encode()) < 512 * 1024
        assert answer.last_position == after
    positions = [w.position for a in pieces for w in a.events]
    assert positions == list(range(1, after + 1))
    assert len(positions) == len(outcome.recorded_types())


@pytest.mark.parametrize("built", ["on_temporal", "in_process"])
async def test_a_waiting_turn_too_large_to_carry_fails_its_run_typed_at_once(
    temporal_client: Client, built: str
) -> None:
    """A decided turn is carried into the run that carries it out (``load_path``'s answer, one
    payload): a reply near the payload limit and a denial quoting a long reason (each under it),
    or a reply an in-process run stored over it, make that answer larger than Temporal takes.
    The run fails at once with ``PayloadTooLargeError`` and stores nothing; the workflow task
    used to be retried until the run's timeout, the client waiting on a run that did nothing."""
    reply_size = 1_400_000 if built == "on_temporal" else 2_500_000
    reason = "r" * (750_000 if built == "on_temporal" else 10)
    script = [Reply(text="a" * reply_size, tool_calls=[email()], chunk_size=reply_size)]
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=(send_email,), approval_wait=0.1)
    async with running_worker(temporal_client, store, {"gated": spec}, task_queue=q):
        ex = executor(temporal_client, q)
        if built == "on_temporal":
            agent = await new("gated", store=store, session_id=sid("tail"), executor=ex)
        else:
            local = await new(
                model(ScriptedModel(script)), store=store, tools=(send_email,), approval_wait=0.1
            )
            await (await local.run("mail bob")).wait()
            agent = await new("gated", store=store, session_id=local.session_id, executor=ex)
        if built == "on_temporal":
            await (await agent.run("mail bob")).wait()  # parks: the call waits
        assert [p.tool_call_id for p in agent.pending_approvals()] == ["c1"]
        await agent.decide("c1", False, reason=reason)
        before = await store.load_entries(agent.session_id)
        outcome = await asyncio.wait_for(consume(await agent.run()), 30)
        assert isinstance(outcome.error, PayloadTooLargeError), repr(outcome.error)
        assert "decided turn" in str(outcome.error)
        assert await store.load_entries(agent.session_id) == before
        assert not agent.running


async def test_an_edit_or_retry_refused_over_the_limit_keeps_the_leaf(
    temporal_client: Client,
) -> None:
    """``edit`` and ``retry`` branch to before the question, then run: a run that refuses its
    input at once (over the payload limit: an edit too long, or a retry of a question an
    in-process run took) leaves the leaf where it was, as their other refusals do. It was left
    before the question, so the next run went on without the conversation."""
    big = "q" * (PAYLOAD_LIMIT + 1)
    script = ScriptedModel(lambda request: Reply(text=f"seen {len(request.messages)}"))
    store, q = MemoryStore(), queue()
    local = await new(model(script), store=store)
    await (await local.run(big)).wait()  # in process: no payload limit
    async with running_worker(temporal_client, store, {"s": AgentSpec(model=script)}, task_queue=q):
        ex = executor(temporal_client, q)
        agent = await new("s", store=store, session_id=local.session_id, executor=ex)
        leaf = agent.leaf_id
        with pytest.raises(PayloadTooLargeError):
            await agent.retry()
        assert agent.leaf_id == leaf
        await (await agent.run("small")).wait()
        assert agent.messages()[-1].text() == "seen 3"  # the whole conversation
        leaf = agent.leaf_id
        with pytest.raises(PayloadTooLargeError):
            await agent.edit(big)
        assert agent.leaf_id == leaf


async def test_inputs_together_over_what_temporal_carries_are_refused_typed(
    temporal_client: Client,
) -> None:
    """A run's inputs travel in its workflow's start, one payload: two messages of 1.1 MB
    (each under the payload limit), or a note whose data is quotes (its stored form, under
    the limit, escaped once more inside the start), are more than Temporal takes. The run is
    refused with ``PayloadTooLargeError`` and nothing is created; Temporal's refusal came
    through as an ``RPCError`` (over HTTP a 503 "try again", which never helps)."""
    script = ScriptedModel(lambda request: Reply(text="seen"))
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"s": AgentSpec(model=script)}, task_queue=q):
        agent = await new(
            "s", store=store, session_id=sid("inputs"), executor=executor(temporal_client, q)
        )
        note = CustomEntry(kind="note", data='"' * 700_000)
        both: list[list[str | CustomEntry]] = [["a" * 1_100_000, "b" * 1_100_000], [note, "hi"]]
        for inputs in both:
            with pytest.raises(PayloadTooLargeError, match="workflow"):
                await agent.run(*inputs)
            assert not agent.running
            assert not await store.list_sessions()
        await (await agent.run("small")).wait()
        assert agent.messages()[-1].text() == "seen"
