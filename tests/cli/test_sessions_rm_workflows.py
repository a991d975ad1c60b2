"""``durable-agent sessions rm --workflows`` deletes the session from its store and its workflows
(whose histories hold its text) from Temporal; a Temporal server that cannot be reached leaves
the session as it was."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent import Reply, ScriptedModel, new
from durable_agent.stores import FileStore
from durable_agent.workflows import SEARCH_ATTRIBUTE, AgentSpec
from tests.cli.support import cli_env, run_cli
from tests.support.polling import eventually
from tests.support.temporal import running_worker
from tests.temporal.helpers import executor, queue

pytestmark = pytest.mark.temporal


async def test_sessions_rm_deletes_the_sessions_workflows_too(
    temporal_client: Client, tmp_path: Path
) -> None:
    root, q = tmp_path / "sessions", queue()
    store = FileStore(root)
    sid = f"rm-{uuid.uuid4().hex[:8]}"
    spec = AgentSpec(model=ScriptedModel([Reply(text="Your PIN is 1234.")]))
    async with running_worker(temporal_client, store, {"chat": spec}, task_queue=q):
        agent = await new(
            "chat", store=store, session_id=sid, executor=executor(temporal_client, q)
        )
        await (await agent.run("What is my PIN?")).wait()
    query = f'{SEARCH_ATTRIBUTE} = "{sid}"'

    async def executions() -> int:
        return len([w async for w in temporal_client.list_workflows(query)])

    listed = await eventually(executions, within=30, what="the run listed")
    address = temporal_client.service_client.config.target_host
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")
    down = run_cli(["sessions", "rm", sid, "--yes", "--workflows", "--address", "127.0.0.1:1"], env)
    assert down.returncode != 0 and (root / f"{sid}.jsonl").exists(), down.stderr
    done = run_cli(["sessions", "rm", sid, "--yes", "--workflows", "--address", address], env)
    assert done.returncode == 0, done.stderr
    assert f"deleted {listed} workflow execution(s)" in done.stdout, done.stdout
    assert not (root / f"{sid}.jsonl").exists()

    async def none_left() -> bool:
        return await executions() == 0

    await eventually(none_left, within=60, interval=0.5, what="the workflows deleted")
