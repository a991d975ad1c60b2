"""A user's cancel wins over the retry timeout: cancelling a run whose worker died during the
model call ends it ``cancelled`` with RunCancelledError, not ``failed`` with the heartbeat
timeout (docs/design.md#cancellation)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from durable_agent import RunCancelledError, new
from durable_agent.stores import FileStore
from durable_agent.workflows import run_workflow_id
from tests.support.worker_process import AGENT, MARKERS
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import (
    CRASH,
    assert_replays,
    consume,
    event_types,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_for_file,
)

pytestmark = pytest.mark.temporal

SLOW_HEARTBEAT = CRASH.model_copy(update={"model_heartbeat": 8.0})
"""Long enough for the cancel to reach the run before the dead call times out: a sticky timeout
(1 s) and one workflow task on the worker that is left, already up."""


async def test_cancel_after_the_worker_died_mid_model_call_ends_cancelled(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    common += ["--root", str(root), "--steps", "1"]
    # Two workers, both streaming the first reply slowly; the one the call lands on is killed.
    # The other is up before the call starts: a worker started after the kill (imports, connect:
    # seconds on a loaded machine) ate the heartbeat timeout, whose retry it then ran to the
    # end before it took the cancel.
    both = [worker_processes.start(*common, "--crash", "model") for _ in range(2)]
    for proc in both:
        await wait_for_file(markers / f"ready-{proc.pid}")

    store = FileStore(root)
    ex = executor(temporal_client, q, timeouts=SLOW_HEARTBEAT)
    agent = await new(AGENT, store=store, session_id=sid("cancel-dead"), executor=ex)
    rid = run_id()
    stream = await agent.run("go", run_id=rid)
    seen = asyncio.create_task(consume(stream))
    await wait_for_file(markers / MARKERS["model"])
    streaming = int((markers / MARKERS["model"]).read_text())
    (first,) = [proc for proc in both if proc.pid == streaming]
    worker_processes.kill(first)  # the model call's worker is gone mid-call

    # the other worker takes the cancel and asks the dead call to stop; nobody answers, so the
    # call ends with its heartbeat timeout, which must not decide how the run ends
    cancelling = asyncio.create_task(stream.cancel())
    handle = temporal_client.get_workflow_handle(run_workflow_id(agent.session_id, rid))

    async def cancel_sent() -> bool:
        history = (await handle.fetch_history()).to_json()
        return "EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED" in event_types(history)

    await eventually(cancel_sent, within=20, what="the activity cancel request")

    outcome = await asyncio.wait_for(seen, 60)
    await asyncio.wait_for(cancelling, 10)
    assert isinstance(outcome.error, RunCancelledError), repr(outcome.error)
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.CANCELED
    stored = await FileStore(root).load_entries(agent.session_id)
    # the input only: the reply never completed, no call is left unanswered
    assert [m.role for m in messages_of(stored)] == ["user"]
    assert agent.leaf_id == stored[-1].id and not agent.running
    await assert_replays(temporal_client, run_workflow_id(agent.session_id, rid))
