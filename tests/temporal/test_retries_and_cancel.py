"""Retries, failures and cancellation on Temporal (docs/design.md#handle-and-engine,
docs/design.md#repair-and-reconcile, docs/design.md#cancellation), compared with the in-process
executor where the behaviour must be the same."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Sequence

import pytest
from temporalio.client import Client

from durable_agent import (
    ModelError,
    Reply,
    RetryPolicy,
    RunCancelledError,
    RunStream,
    ScriptedModel,
    model,
    new,
    tool,
)
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.session import Entry, SessionRecord
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    Outcome,
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    event_types,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal

CANCEL_BUDGET = 2.0
"""Seconds from ``stream.cancel()`` to ``wait()`` raising (heartbeats are throttled to 0.5 s)."""


async def test_retryable_model_error_then_success_stores_one_message(
    temporal_client: Client,
) -> None:
    lm = ScriptedModel(
        [
            Reply(text="half a rep", error=ModelError("overloaded", retryable=True)),
            Reply(error=ModelError("rate limited", retryable=True)),
            "the answer",
        ]
    )
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("retry"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("question"))

    assert outcome.error is None, repr(outcome.error)
    assert len(lm.requests) == 3
    stored = await store.load_entries(agent.session_id)
    assert [m.text() for m in messages_of(stored)] == ["question", "the answer"]
    assert_one_chain(stored)
    assert [m.text() for m in outcome.messages or []] == ["the answer"]
    assert outcome.types().count("message_start") == 1
    assert outcome.types().count("message_end") == 1


@pytest.mark.parametrize("hint", [3600.0, 1e308], ids=["an hour", "past timedelta"])
async def test_a_providers_retry_hint_waits_no_longer_than_the_policys_longest_backoff(
    temporal_client: Client, hint: float
) -> None:
    """A rate limit's ``retry-after`` is honoured up to the retry policy's maximum interval, as
    in process (``RetryingModel``): a provider asking for an hour, or for more seconds than a
    ``timedelta`` holds, does not park the run for that long (nor fail the activity otherwise)."""
    lm = ScriptedModel(
        [Reply(error=ModelError("rate limited", retryable=True, retry_after=hint)), "the answer"]
    )
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("hint"), executor=executor(temporal_client, q)
        )
        stream = await agent.run("question")
        # FAST's longest backoff is half a second; the hint's hour would outlast this bound
        messages = await asyncio.wait_for(stream.wait(), 20)

    assert [m.text() for m in messages] == ["the answer"]
    assert len(lm.requests) == 2


async def test_non_retryable_model_error_fails_the_run_input_stays(temporal_client: Client) -> None:
    lm = ScriptedModel(
        [Reply(error=ModelError("invalid request: bad tool schema", retryable=False))]
    )
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("fatal"), executor=executor(temporal_client, q)
        )
        stream = await agent.run("question")
        with pytest.raises(ModelError) as caught:
            await stream.wait()
    assert caught.value.retryable is False
    assert "invalid request: bad tool schema" in str(caught.value)
    assert len(lm.requests) == 1
    stored = await store.load_entries(agent.session_id)
    assert [m.text() for m in messages_of(stored)] == ["question"]
    assert agent.leaf_id == stored[-1].id and not agent.running


async def test_retryable_model_error_exhausting_attempts_fails_with_model_error(
    temporal_client: Client,
) -> None:
    lm = ScriptedModel(lambda request: Reply(error=ModelError("still overloaded", retryable=True)))
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        ex = executor(temporal_client, q)
        ex.timeouts = ex.timeouts.model_copy(update={"model_max_attempts": 3})
        agent = await new("a", store=store, session_id=sid("exhaust"), executor=ex)
        with pytest.raises(ModelError) as caught:
            await (await agent.run("question")).wait()
    assert caught.value.retryable is True
    assert len(lm.requests) == 3
    assert [m.text() for m in messages_of(await store.load_entries(agent.session_id))] == [
        "question"
    ]


async def test_failing_tools_are_answered_after_their_retry_policy(temporal_client: Client) -> None:
    attempts = {"flaky": 0, "strict": 0}

    @tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05, backoff=1.0))
    async def flaky() -> str:
        """Always fails."""
        attempts["flaky"] += 1
        raise RuntimeError("kaput")

    @tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
    async def strict(n: int) -> str:
        """Fails non-retryably."""
        attempts["strict"] += 1
        raise ValueError(f"bad n {n}")

    script: list[Reply | str] = [
        Reply(
            tool_calls=[
                *Reply.call("flaky", id="f1").tool_calls,
                *Reply.call("strict", {"n": 7}, id="s1").tool_calls,
            ]
        ),
        "noted",
    ]
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=[flaky, strict])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("toolfail"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))
    assert outcome.error is None, repr(outcome.error)
    assert attempts == {"flaky": 3, "strict": 1}
    stored = await store.load_entries(agent.session_id)
    results = [m for m in messages_of(stored) if m.role == "tool_result"]
    assert [(m.tool_call_id, m.text(), m.is_error) for m in results] == [
        ("f1", "tool execution failed: RuntimeError: kaput", True),
        ("s1", "tool execution failed: ValueError: bad n 7", True),
    ]

    # the same results in-process
    local_store = MemoryStore()
    attempts.update(flaky=0, strict=0)
    local = await new(model(ScriptedModel(script)), store=local_store, tools=(flaky, strict))
    await (await local.run("go")).wait()
    local_results = [
        m
        for m in messages_of(await local_store.load_entries(local.session_id))
        if m.role == "tool_result"
    ]
    assert [(m.text(), m.is_error) for m in local_results] == [
        (m.text(), m.is_error) for m in results
    ]


class SignallingModel:
    """A ScriptedModel that sets ``streaming`` once it has streamed a few deltas."""

    def __init__(self, inner: ScriptedModel, after: int = 3) -> None:
        self.inner = inner
        self.after = after
        self.streaming = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        deltas = 0
        async for event in self.inner.stream(request):
            if event.type != "start":
                deltas += 1
                if deltas >= self.after:
                    self.streaming.set()
            yield event


LONG = "a long answer streaming slowly enough to be interrupted by the user " * 3


async def _cancel_mid_stream(
    agent_run: Awaitable[RunStream], lm: SignallingModel
) -> tuple[Outcome, float]:
    stream = await agent_run
    seen = asyncio.create_task(consume(stream))
    await asyncio.wait_for(lm.streaming.wait(), 20)
    started = time.monotonic()
    await stream.cancel()
    outcome = await asyncio.wait_for(seen, 20)
    return outcome, time.monotonic() - started


async def test_cancel_mid_model_stream_stores_the_partial_reply(temporal_client: Client) -> None:
    script = [Reply(text=LONG, chunk_delay=0.05, chunk_size=4)]
    lm = SignallingModel(ScriptedModel(script))
    store, q = MemoryStore(), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("cancel"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        outcome, took = await _cancel_mid_stream(agent.run("tell me", run_id=rid), lm)

    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    assert took < CANCEL_BUDGET, f"cancellation took {took:.2f}s"
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    messages = messages_of(stored)
    assert [m.role for m in messages] == ["user", "assistant"]
    partial = messages[1]
    assert partial.stop_reason == "aborted"
    assert partial.text() and LONG.startswith(partial.text()) and partial.text() != LONG
    assert agent.leaf_id == stored[-1].id and not agent.running

    local_lm = SignallingModel(ScriptedModel(script))
    local = await new(model(local_lm), store=MemoryStore())
    local_outcome, _ = await _cancel_mid_stream(local.run("tell me"), local_lm)
    assert isinstance(local_outcome.error, RunCancelledError)

    # the same events as in-process, live deltas aside
    assert outcome.recorded_types() == local_outcome.recorded_types()


async def test_cancel_while_a_tool_runs_answers_it_cancelled(temporal_client: Client) -> None:
    gate = asyncio.Event()
    ran = asyncio.Event()

    @tool
    async def forever(n: int) -> str:
        """Never finishes on its own."""
        ran.set()
        await gate.wait()
        return "unreachable"

    script = [
        Reply(
            text="calling two",
            tool_calls=[
                *Reply.call("forever", {"n": 1}, id="t1").tool_calls,
                *Reply.call("forever", {"n": 2}, id="t2").tool_calls,
            ],
        )
    ]
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=[forever])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("cancel-tool"), executor=executor(temporal_client, q)
        )
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(ran.wait(), 20)
        await wait_state(
            temporal_client, agent.session_id, rid, lambda s: s.status == "running_tools"
        )
        started = time.monotonic()
        await stream.cancel()
        outcome = await asyncio.wait_for(seen, 20)
        took = time.monotonic() - started
        gate.set()

    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    assert took < CANCEL_BUDGET, f"cancellation took {took:.2f}s"
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))
    stored = await store.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    messages = messages_of(stored)
    assert [m.role for m in messages] == ["user", "assistant", "tool_result", "tool_result"]
    assert [(m.tool_call_id, m.text(), m.is_error) for m in messages[2:]] == [
        ("t1", "tool execution cancelled", True),
        ("t2", "tool execution cancelled", True),
    ]

    # the same events as in-process
    gate.clear()
    ran.clear()
    local = await new(model(ScriptedModel(script)), store=MemoryStore(), tools=(forever,))
    local_stream = await local.run("go")
    local_seen = asyncio.create_task(consume(local_stream))
    await asyncio.wait_for(ran.wait(), 20)
    await local_stream.cancel()
    local_outcome = await local_seen
    assert isinstance(local_outcome.error, RunCancelledError)
    assert outcome.recorded_types() == local_outcome.recorded_types()


class GatedStore:
    """A store whose append of an assistant message waits for ``release`` (after ``entered``)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if any(m.role == "assistant" for m in messages_of(entries)) and not self.release.is_set():
            self.entered.set()
            await self.release.wait()
        await self.inner.append_entries(session_id, entries)


async def test_cancel_while_an_append_is_in_flight_keeps_one_chain(temporal_client: Client) -> None:
    """The write in flight completes and gets its receipt; the cancel results follow it."""

    @tool
    async def never(n: int) -> str:
        """Not reached: the run is cancelled before the tool starts."""
        return "ran"

    script = [
        Reply(text="about to call", tool_calls=Reply.call("never", {"n": 1}, id="n1").tool_calls)
    ]
    memory = MemoryStore()
    store = GatedStore(memory)
    q = queue()
    spec = AgentSpec(model=ScriptedModel(script), tools=[never])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a",
            store=memory,
            session_id=sid("cancel-append"),
            executor=executor(temporal_client, q),
        )
        rid = run_id()
        stream = await agent.run("go", run_id=rid)
        seen = asyncio.create_task(consume(stream))
        await asyncio.wait_for(store.entered.wait(), 20)
        cancelling = asyncio.create_task(stream.cancel())
        await _cancel_requested(temporal_client, agent.session_id, rid)  # while the write waits
        store.release.set()
        await asyncio.wait_for(cancelling, 20)
        outcome = await asyncio.wait_for(seen, 20)

    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))
    stored = await memory.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    messages = messages_of(stored)
    assert [m.role for m in messages] == ["user", "assistant", "tool_result"]
    assert (messages[2].tool_call_id, messages[2].text()) == ("n1", "tool execution cancelled")
    assert agent.leaf_id == stored[-1].id


async def _cancel_requested(client: Client, session_id: str, rid: str) -> None:
    handle = client.get_workflow_handle(run_workflow_id(session_id, rid))

    async def probe() -> bool:
        history = await handle.fetch_history()
        return "EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED" in event_types(history.to_json())

    await eventually(probe, within=20, interval=0.05, what="the cancel request")
