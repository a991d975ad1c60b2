"""A run's cancellation reaches its calls in flight through the run's cancel note on the live
channel, not through a heartbeat response (docs/design.md#cancellation): with heartbeat timeouts
of half a minute (a first heartbeat 15 s into a call), a streaming model call and a running tool
still stop within a second or two of ``stream.cancel()`` or of an operator's Request
Cancellation, and the run ends cancelled with what the user saw stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client, WorkflowFailureError

from durable_agent import Reply, RunCancelledError, ScriptedModel, new, tool
from durable_agent.ai import ModelEvent, ModelRequest, ToolCall
from durable_agent.session.deltas import DeltaKey
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import (
    assert_one_chain,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
)
from tests.temporal.test_reset import reset

pytestmark = pytest.mark.temporal

SLOW_BEATS = FAST.model_copy(update={"model_heartbeat": 30.0, "tool_heartbeat": 30.0})
STOP_BOUND = 2.0
"""Seconds from the cancel request to the call's stop (the bench measures the p95: under 1 s)."""


class EndlessModel:
    """Streams a token every 50 ms until it is stopped; records when."""

    def __init__(self) -> None:
        self.streaming = asyncio.Event()
        self.stopped_at: float | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        inner = ScriptedModel([Reply(text="token " * 10_000, chunk_size=6, chunk_delay=0.05)])
        try:
            n = 0
            async for event in inner.stream(request):
                n += 1
                if n > 5:
                    self.streaming.set()
                yield event
        finally:
            self.stopped_at = time.monotonic()


@pytest.mark.parametrize("who", ["client", "operator"])
async def test_a_streaming_model_call_stops_within_a_second_or_two(
    temporal_client: Client, tmp_path: object, who: str
) -> None:
    lm, q = EndlessModel(), queue()
    store = FileStore(f"{tmp_path}/sessions")
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=SLOW_BEATS)
        agent = await new("a", store=store, session_id=sid("note"), executor=ex)
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(lm.streaming.wait(), 20)
        asked = time.monotonic()
        if who == "client":
            await stream.cancel()
        else:  # the UI's Request Cancellation: no client of ours involved
            await temporal_client.get_workflow_handle(
                run_workflow_id(agent.session_id, rid)
            ).cancel()
        outcome = await asyncio.wait_for(seen, 20)
    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    stopped_at = lm.stopped_at
    assert stopped_at is not None
    assert stopped_at - asked < STOP_BOUND, stopped_at - asked
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    [_, partial] = messages_of(stored)
    assert partial.stop_reason == "aborted" and partial.text().startswith("token")


async def test_a_running_tool_stops_within_a_second_or_two(
    temporal_client: Client, tmp_path: object
) -> None:
    ran = asyncio.Event()
    stopped: list[float] = []

    @tool
    async def forever(n: int) -> str:
        """Never finishes on its own."""
        ran.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(time.monotonic())
        return "unreachable"

    script = [Reply(tool_calls=[ToolCall(id="f1", name="forever", arguments={"n": 1})])]
    store, q = FileStore(f"{tmp_path}/sessions"), queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=[forever])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=SLOW_BEATS)
        agent = await new("a", store=store, session_id=sid("note-tool"), executor=ex)
        stream = await agent.run("go")
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(ran.wait(), 20)
        asked = time.monotonic()
        await stream.cancel()
        outcome = await asyncio.wait_for(seen, 20)
        done = time.monotonic() - asked
    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    assert stopped and stopped[0] - asked < STOP_BOUND, stopped
    assert done < STOP_BOUND + 1.0, done  # the run waited for its lone call to stop
    stored = await store.load_entries(agent.session_id)
    assert [(m.role, m.text()) for m in messages_of(stored)[2:]] == [
        ("tool_result", "tool execution cancelled")
    ]


async def test_a_cancelled_replys_live_deltas_are_cleared_like_a_stored_ones(
    temporal_client: Client, tmp_path: object
) -> None:
    """The reply a cancellation cut short is stored too (``aborted``): its deltas go after the
    same grace period as a complete reply's, not only when a sweep finds them ten minutes later
    (its text, a deleted session's included, stays on disk until then)."""
    lm, q = EndlessModel(), queue()
    store = FileStore(f"{tmp_path}/sessions")
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=SLOW_BEATS)
        agent = await new("a", store=store, session_id=sid("cut"), executor=ex)
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(lm.streaming.wait(), 20)
        reply = store.live_deltas().path(DeltaKey(agent.session_id, rid, 1))

        async def written() -> bool:
            return reply.exists()

        async def cleared() -> bool:
            return not reply.exists()

        await eventually(written, within=10, what="the reply's first deltas")
        await stream.cancel()
        outcome = await asyncio.wait_for(seen, 20)
        assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
        await eventually(cleared, within=20, what="the cut reply's deltas cleared")


@pytest.mark.parametrize("again", ["reset", "same workflow ID"])
async def test_a_cancel_note_stops_only_the_execution_that_was_cancelled(
    temporal_client: Client, tmp_path: object, again: str
) -> None:
    """An operator cancels a run mid-tool, then runs it again under its workflow ID at once
    (``temporal workflow reset``, or a start with the same ID): the new execution has the same
    run ID, and the note the cancelled one left (kept a minute) cancelled its tool at once and
    failed it untyped ("run cancelled"). Its tool runs now, and it completes."""
    calls: list[str] = []
    ran = asyncio.Event()

    @tool
    async def slow(n: int) -> str:
        """Blocks on its first call (until cancelled); answers in a second and a half after that."""
        calls.append("call")
        if len(calls) == 1:
            ran.set()
            await asyncio.Event().wait()
        await asyncio.sleep(1.5)  # a few checks of the cancel notes
        return "done slowly"

    call = ToolCall(id="s1", name="slow", arguments={"n": 1})
    script: list[Reply | str] = [Reply(tool_calls=[call]), Reply(tool_calls=[call]), "finished"]
    store, q = FileStore(f"{tmp_path}/sessions"), queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=[slow])
    session = sid("note-again")
    wid = run_workflow_id(session, "op-1")
    body = {"session_id": session, "agent": "a", "text": "go"}
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        handle = await temporal_client.start_workflow(
            "durable_agent.run", body, id=wid, task_queue=q
        )
        await asyncio.wait_for(ran.wait(), 20)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 20)
        if again == "reset":
            await asyncio.to_thread(reset, temporal_client, wid, "--type", "FirstWorkflowTask")
        else:
            await temporal_client.start_workflow("durable_agent.run", body, id=wid, task_queue=q)
        result = await asyncio.wait_for(temporal_client.get_workflow_handle(wid).result(), 20)
    assert result["status"] == "completed", result
    texts = [m.text() for m in messages_of(await store.load_entries(session))]
    assert texts[-2:] == ["done slowly", "finished"], texts
    assert len(calls) == 2
