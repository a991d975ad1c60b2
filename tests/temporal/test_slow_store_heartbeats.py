"""A model or tool attempt stays alive while its store read is slow.

``call_model`` and ``call_tool`` first read the session from the store (the view at the leaf, the
stamp check); under load that read took seconds on FerretDB, and it ran before the activity's
heartbeats started, so the server timed the attempt out (``activity Heartbeat timeout``) and,
after the model's five attempts, failed the run: at 2 workers x 200 sessions in
``bench/load_bench.py``. Here the read of one activity type is held, in a real store, until the
server shows the attempt has outlived its heartbeat timeout (it heartbeated past it) or was
timed out; with no attempt left after it, the run completes only if the read is covered by
heartbeats.

Since a first attempt no longer reads the store (its path is known to the worker, and only a
retry can find its stamp stored: ``activities/base.py is_retry``), the read held is the stamp
lookup of the second attempt: the model or the tool fails once, retryably, and two attempts are
allowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus

from durable_agent import Reply, RetryPolicy, ScriptedModel, ToolCall, new, tool
from durable_agent.ai import LanguageModel, ModelError, ModelEvent, ModelRequest
from durable_agent.session import Entry
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, run_workflow_id
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import executor, messages_of, queue, run_id, sid

pytestmark = pytest.mark.temporal

HEARTBEAT = 1.0
"""The model and tool heartbeat timeout here: the held read lasts longer than this."""


class SlowReadStore(MemoryStore):
    """A memory store whose first ``load_entries`` inside a retry of activity ``held_in`` waits
    for ``release`` (a read that takes longer than the heartbeat timeout)."""

    def __init__(self, held_in: str) -> None:
        super().__init__()
        self.held_in = held_in
        self.release = asyncio.Event()
        self.reads_held = 0

    async def load_entries(self, session_id: str) -> list[Entry]:
        if (
            self.reads_held == 0
            and activity.in_activity()
            and activity.info().activity_type == self.held_in
            and activity.info().attempt == 2
        ):
            self.reads_held += 1
            await self.release.wait()
        return await super().load_entries(session_id)


async def _outlived_or_timed_out(client: Client, workflow_id: str, activity_type: str) -> str:
    """Once the held attempt has heartbeated past its timeout (``"alive"``), or the server timed
    it out (a later attempt, or the run closed: ``"timed out"``)."""
    handle = client.get_workflow_handle(workflow_id)

    async def probe() -> str | None:
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            return "timed out"
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name != activity_type:
                continue
            if pending.attempt > 2:
                return "timed out"
            if pending.attempt < 2:
                return None
            if not pending.HasField("last_heartbeat_time"):
                return None
            beat = pending.last_heartbeat_time.ToDatetime()
            started = pending.last_started_time.ToDatetime()
            if (beat - started).total_seconds() > HEARTBEAT:
                return "alive"
        return None

    return await eventually(probe, within=30, what=f"{activity_type} outliving its heartbeat")


class FailsOnce:
    """A model whose first call fails retryably (so its second attempt looks its stamp up)."""

    def __init__(self, inner: LanguageModel) -> None:
        self.inner = inner
        self.failed = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if not self.failed:
            self.failed = True
            raise ModelError("overloaded", retryable=True)
        async for event in self.inner.stream(request):
            yield event


@pytest.mark.parametrize("held_in", ["durable_agent.call_model", "durable_agent.call_tool"])
async def test_a_slow_store_read_does_not_time_the_attempt_out(
    temporal_client: Client, held_in: str
) -> None:
    tool_runs: list[str] = []

    @tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
    async def lookup() -> str:
        """Fails its first run when the tool's retry is the one held."""
        tool_runs.append("run")
        if held_in == "durable_agent.call_tool" and len(tool_runs) == 1:
            raise RuntimeError("flaky")
        return "looked up"

    script = ScriptedModel(
        [Reply(tool_calls=[ToolCall(id="c1", name="lookup", arguments={})]), "the answer"]
    )
    lm: LanguageModel = FailsOnce(script) if held_in == "durable_agent.call_model" else script
    store, q = SlowReadStore(held_in), queue()
    timeouts = FAST.model_copy(
        update={"model_heartbeat": HEARTBEAT, "tool_heartbeat": HEARTBEAT, "model_max_attempts": 2}
    )
    spec = AgentSpec(model=lm, tools=[lookup])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        ex = executor(temporal_client, q, timeouts=timeouts)
        agent = await new("a", store=store, session_id=sid("slowread"), executor=ex)
        rid = run_id()
        stream = await agent.run("question", run_id=rid)
        workflow_id = run_workflow_id(agent.session_id, rid)
        verdict = await _outlived_or_timed_out(temporal_client, workflow_id, held_in)
        store.release.set()
        outcome = await asyncio.gather(stream.wait(), return_exceptions=True)
    assert store.reads_held == 1
    assert verdict == "alive", outcome
    assert not isinstance(outcome[0], BaseException), repr(outcome[0])
    stored = messages_of(await store.load_entries(agent.session_id))
    assert [m.role for m in stored] == ["user", "assistant", "tool_result", "assistant"]
    assert stored[-1].text() == "the answer"
