"""The default execution timeout of library-started workflows and how to change it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel, new
from durable_agent.stores import MemoryStore
from durable_agent.workflows import (
    DEFAULT_EXECUTION_TIMEOUT,
    ENV_RUN_TIMEOUT,
    AgentSpec,
    TemporalExecutor,
    run_workflow_id,
)
from durable_agent.workflows.run_timeout import parse_timeout, run_timeout_from_env
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import consume, queue, run_id


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90", timedelta(seconds=90)),
        ("90s", timedelta(seconds=90)),
        ("30m", timedelta(minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        (" 7d ", timedelta(days=7)),
        ("none", None),
        ("OFF", None),
        ("0", None),
    ],
)
def test_parse_timeout(text: str, expected: timedelta | None) -> None:
    assert parse_timeout(text) == expected


@pytest.mark.parametrize("bad", ["soon", "-5m", "10 minutes", "1w", ""])
def test_a_malformed_timeout_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid timeout"):
        parse_timeout(bad)


def test_default_is_24_hours_unless_the_environment_says_otherwise() -> None:
    assert timedelta(hours=24) == DEFAULT_EXECUTION_TIMEOUT
    assert run_timeout_from_env({}) == DEFAULT_EXECUTION_TIMEOUT
    assert run_timeout_from_env({ENV_RUN_TIMEOUT: ""}) == DEFAULT_EXECUTION_TIMEOUT
    assert run_timeout_from_env({ENV_RUN_TIMEOUT: "2h"}) == timedelta(hours=2)
    assert run_timeout_from_env({ENV_RUN_TIMEOUT: "none"}) is None
    with pytest.raises(ValueError, match="invalid timeout"):
        run_timeout_from_env({ENV_RUN_TIMEOUT: "forever"})


async def _timeouts_of_a_run(client: Client, executor: TemporalExecutor, q: str) -> timedelta:
    lm = ScriptedModel(["hello"])
    store, session = MemoryStore(), f"timeout-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, store, {"plain": AgentSpec(model=lm)}, task_queue=q):
        agent = await new("plain", store=store, session_id=session, executor=executor)
        rid = run_id()
        outcome = await consume(await agent.run("hi", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
    described = await client.get_workflow_handle(run_workflow_id(session, rid)).describe()
    timeout = described.raw_description.execution_config.workflow_execution_timeout
    return timeout.ToTimedelta()


@pytest.mark.temporal
async def test_library_runs_get_the_default_and_the_environment_changes_it(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_RUN_TIMEOUT, raising=False)
    q = queue()
    default = TemporalExecutor(temporal_client, task_queue=q, timeouts=FAST)
    assert await _timeouts_of_a_run(temporal_client, default, q) == timedelta(hours=24)

    monkeypatch.setenv(ENV_RUN_TIMEOUT, "45m")  # what every CLI command's executor reads
    from_env = TemporalExecutor(temporal_client, task_queue=q, timeouts=FAST)
    assert await _timeouts_of_a_run(temporal_client, from_env, q) == timedelta(minutes=45)

    explicit = TemporalExecutor(
        temporal_client, task_queue=q, timeouts=FAST, execution_timeout=timedelta(minutes=3)
    )
    assert await _timeouts_of_a_run(temporal_client, explicit, q) == timedelta(minutes=3)

    monkeypatch.setenv(ENV_RUN_TIMEOUT, "eventually")
    with pytest.raises(ValueError, match="invalid timeout 'eventually'"):
        TemporalExecutor(temporal_client, task_queue=q)
