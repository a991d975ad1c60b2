"""A run waits for a person's decision and its worker is SIGKILLed: until another worker comes,
nothing takes a ``decide`` or ``send`` update. Whoever waits for one must be able to stop
waiting as asyncio stops anything (a timeout raises ``TimeoutError``, Ctrl-C ends ``durable-agent
approve`` as "interrupted", exit 130; left alone, it says once that no worker has taken the
decision yet and waits on), and a fresh worker then finishes the run once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import Client
from temporalio.service import RPCError

from durable_agent import new
from durable_agent.session import ApprovalDecision, ApprovalRequest
from durable_agent.stores import FileStore
from durable_agent.workflows import run_workflow_id
from durable_agent.workflows.mail_client import decide_update_id
from tests.cli.support import CLI, cli_env
from tests.support.worker_process import AGENT
from tests.temporal.conftest import ROOT, WorkerProcesses
from tests.temporal.helpers import (
    CRASH,
    assert_one_chain,
    eventually,
    executor,
    messages_of,
    queue,
    sid,
    wait_for_file,
)

pytestmark = pytest.mark.temporal


async def _admitted(client: Client, workflow_id: str, update_id: str) -> bool:
    """Whether the server holds the update (admitted, waiting for a worker), asked for that
    stage: an update it does not know is refused at once. Polling for the outcome instead read
    a timed-out poll as held, so a slow answer about an update not sent yet let the test press
    Ctrl-C while the CLI was still starting (a KeyboardInterrupt traceback)."""
    admitted = (
        UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
    )
    ref = UpdateRef(
        workflow_execution=WorkflowExecution(workflow_id=workflow_id), update_id=update_id
    )
    poll = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace, update_ref=ref, wait_policy=WaitPolicy(lifecycle_stage=admitted)
    )
    try:
        got = await client.workflow_service.poll_workflow_execution_update(poll)
    except RPCError:
        return False
    return bool(got.stage >= admitted)


async def test_waiting_for_an_update_no_worker_takes_can_be_stopped(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    common += ["--root", str(root), "--steps", "1", "--approval"]
    first = worker_processes.start(*common)
    await wait_for_file(markers / f"ready-{first.pid}")
    session = sid("no-worker")
    runs = executor(temporal_client, q, timeouts=CRASH)
    agent = await new(AGENT, store=FileStore(root), session_id=session, executor=runs)
    stream = await agent.run("go", run_id="r1")
    events = stream.events()
    async for event in events:
        if event.agent is not None and event.agent.type == "approval_requested":
            break
    worker_processes.kill(first)
    (waiting,) = agent.pending_approvals()
    call = waiting.tool_call_id

    # Ctrl-C on `durable-agent approve` while the update waits: interrupted, no traceback
    env = cli_env(tmp_path / "home")
    argv = [*CLI, "approve", session, call, "--store", f"file:{root}", "--address", address]
    argv += ["--task-queue", q, "--agent", AGENT]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    wid = run_workflow_id(session, "r1")
    await eventually(
        lambda: _admitted(temporal_client, wid, decide_update_id(call, waiting.request_id)),
        within=30,
        what="the update held",
    )
    proc.send_signal(signal.SIGINT)
    said = b"".join(await asyncio.wait_for(proc.communicate(), 30)).decode()
    assert proc.returncode == 130, said
    assert "interrupted" in said and "Traceback" not in said, said

    # a caller's timeout is a timeout, not the SDK's update error
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.decide(call, True), 1.0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(stream.send("and then?"), 1.0)

    # a fresh worker: the decision (sent again: one decision by its update ID) lets the run go
    # on; the message whose sender stopped waiting may still be delivered (the server held its
    # update), then its turn asks again
    worker_processes.start(*common)
    await agent.decide(call, True)
    async for event in events:
        if event.agent is not None and event.agent.type == "approval_requested":
            for pending in agent.pending_approvals():
                await agent.decide(pending.tool_call_id, True)
    entries = await FileStore(root).load_entries(session)
    assert_one_chain(entries)
    asked = [e for e in entries if isinstance(e, ApprovalRequest)]
    decided = [e.tool_call_id for e in entries if isinstance(e, ApprovalDecision)]
    assert decided == [e.tool_call_id for e in asked]  # each call decided once
    asks = [m.text() for m in messages_of(entries) if m.role == "user"]
    assert asks in (["go"], ["go", "and then?"])
    results = [m.text() for m in messages_of(entries) if m.role == "tool_result"]
    assert results == ["step 1 done"] * len(asks)
    assert messages_of(entries)[-1].text() == f"finished: {asks[-1]}"


async def test_approve_says_no_worker_took_the_decision_and_waits_for_one(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    common += ["--root", str(root), "--steps", "1", "--approval"]
    first = worker_processes.start(*common)
    await wait_for_file(markers / f"ready-{first.pid}")
    session = sid("no-worker-cli")
    runs = executor(temporal_client, q, timeouts=CRASH)
    agent = await new(AGENT, store=FileStore(root), session_id=session, executor=runs)
    stream = await agent.run("go", run_id="r1")
    async for event in stream.events():
        if event.agent is not None and event.agent.type == "approval_requested":
            break
    worker_processes.kill(first)
    (call,) = [p.tool_call_id for p in agent.pending_approvals()]

    argv = [*CLI, "deny", session, call, "--store", f"file:{root}", "--address", address]
    argv += ["--task-queue", q, "--agent", AGENT, "--reason", "not now"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ROOT,
        env=cli_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert line.startswith("note: no worker has taken the decision yet;"), line
        assert f"when a worker polls the queue {q!r}; Ctrl-C stops waiting" in line, line
        assert proc.returncode is None  # it waits on

        worker_processes.start(*common)
        out, rest = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, (out, rest)
    assert f"denied {call}" in out.decode()
    assert b"no worker" not in rest, rest  # said once
    await stream.wait()
    entries = await FileStore(root).load_entries(session)
    decided = [e for e in entries if isinstance(e, ApprovalDecision)]
    assert [(d.tool_call_id, d.approved, d.reason) for d in decided] == [(call, False, "not now")]
