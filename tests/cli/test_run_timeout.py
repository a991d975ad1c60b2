"""`durable-agent run --timeout N` (and Ctrl-C in `run`, `chat`) with no worker polling its queue.

The run's workflow starts but nothing executes it, so its cancellation can only take effect once
a worker picks it up. The command must still exit soon after the timeout (its wait for the
cancellation is bounded, as on Ctrl-C), say what happened, and leave the cancellation requested.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pexpect
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.cli.run import CANCEL_WAIT
from durable_agent.workflows import ensure_search_attribute
from tests.cli.support import CLI, cli_env, plain
from tests.support.polling import eventually

pytestmark = pytest.mark.temporal

TIMEOUT = 2.0
STARTUP_SLACK = 30.0
"""Interpreter start, imports and the server round trips, on a loaded two-core machine."""


async def test_run_timeout_exits_when_no_worker_polls(
    temporal_client: Client, tmp_path: Path
) -> None:
    await ensure_search_attribute(temporal_client)  # what `durable-agent worker` would do
    queue = f"nobody-{uuid.uuid4().hex[:10]}"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    args = ["run", "s1", "hi", "--timeout", f"{TIMEOUT:g}", "--task-queue", queue]
    args += ["--store", f"file:{tmp_path / 'sessions'}"]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    bound = TIMEOUT + CANCEL_WAIT + STARTUP_SLACK
    try:
        _out, err = await asyncio.wait_for(proc.communicate(), bound)
    except TimeoutError:
        raise AssertionError(f"`run --timeout {TIMEOUT:g}` still running after {bound} s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    elapsed = time.monotonic() - started
    stderr = err.decode()
    assert proc.returncode == 1, stderr
    assert f"did not finish in {TIMEOUT:g} s" in stderr, stderr
    assert "cancellation was requested" in stderr, stderr
    assert "Traceback" not in stderr
    assert elapsed >= TIMEOUT

    # the run it started is still there, asked to cancel: a worker that comes later cancels it
    runs = [
        w
        async for w in temporal_client.list_workflows(
            f'TaskQueue="{queue}" AND WorkflowType="durable_agent.run"'
        )
    ]
    assert len(runs) == 1, [w.id for w in runs]
    history = await temporal_client.get_workflow_handle(runs[0].id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED in kinds
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in kinds  # nobody ran it


async def test_ctrl_c_with_no_worker_says_the_cancellation_waits(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Ctrl-C on a ``run`` nobody executes: the cancellation is only requested, and the command
    says so as ``--timeout`` does. It said ``run cancelled; session s1 is at leaf  (durable-agent
    show s1)``: no run had ended, and no such session existed to show."""
    await ensure_search_attribute(temporal_client)
    queue = f"nobody-{uuid.uuid4().hex[:10]}"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    sid = f"s-{uuid.uuid4().hex[:10]}"  # no other test's run going on it (that refuses this one)
    args = ["run", sid, "hi", "--task-queue", queue, "--store", f"file:{tmp_path / 'sessions'}"]
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        query = f'TaskQueue="{queue}" AND WorkflowType="durable_agent.run"'

        async def started() -> bool:
            return [w async for w in temporal_client.list_workflows(query)] != []

        await eventually(started, within=STARTUP_SLACK, what="the run's workflow started")
        proc.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(proc.communicate(), CANCEL_WAIT + STARTUP_SLACK)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 130, stderr
    assert "cancellation was requested" in stderr, stderr
    assert "run cancelled" not in stderr and "Traceback" not in stderr, stderr


async def test_chat_ctrl_c_with_no_worker_says_the_cancellation_waits(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The same in ``chat``: it said ``run cancelled; session c1 is at leaf `` after 30 s of
    silence, of a run no worker had taken, which ends only once one does."""
    await ensure_search_attribute(temporal_client)
    queue = f"nobody-{uuid.uuid4().hex[:10]}"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    sid = f"c-{uuid.uuid4().hex[:10]}"
    args = ["chat", sid, "--task-queue", queue, "--store", f"file:{tmp_path / 'sessions'}"]
    chat = pexpect.spawn(CLI[0], [*CLI[1:], *args], env=env, encoding="utf-8", timeout=60)
    try:
        chat.expect(f"{sid} ▸ ")
        chat.sendline("hi")
        query = f'TaskQueue="{queue}" AND WorkflowType="durable_agent.run"'

        async def started() -> bool:
            return [w async for w in temporal_client.list_workflows(query)] != []

        await eventually(started, within=STARTUP_SLACK, what="the run's workflow started")
        chat.sendintr()
        chat.expect(f"{sid} ▸ ", timeout=CANCEL_WAIT + STARTUP_SLACK)
        said = plain(chat.before or "")
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
    finally:
        chat.close(force=True)
    assert "cancellation was requested" in said, said
    assert "run cancelled" not in said and "Traceback" not in said, said
