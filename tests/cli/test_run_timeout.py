"""`durable-agent run --timeout N` with no worker polling its queue.

The run's workflow starts but nothing executes it, so its cancellation can only take effect once
a worker picks it up. The command must still exit soon after the timeout (its wait for the
cancellation is bounded, as on Ctrl-C), say what happened, and leave the cancellation requested.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.cli.run import CANCEL_WAIT
from durable_agent.workflows import ensure_search_attribute
from tests.cli.support import CLI, cli_env

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
