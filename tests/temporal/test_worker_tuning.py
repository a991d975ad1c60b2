"""Worker tuning: the three limits reach the temporalio Worker; bad ones fail."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import InvalidRunInputError, ScriptedModel
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, create_worker
from durable_agent.workflows.worker import (
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
)

pytestmark = pytest.mark.temporal


async def test_limits_reach_the_temporal_worker(temporal_client: Client) -> None:
    worker = await create_worker(
        temporal_client,
        task_queue="tuning-a",
        store=MemoryStore(),
        agents={},
        register_search_attribute=False,
        max_concurrent_activities=7,
        max_concurrent_workflow_tasks=5,
        max_cached_workflows=3,
    )
    config = worker.config()
    assert config.get("max_concurrent_activities") == 7
    assert config.get("max_concurrent_workflow_tasks") == 5
    assert config.get("max_cached_workflows") == 3


async def test_documented_defaults(temporal_client: Client) -> None:
    worker = await create_worker(
        temporal_client,
        task_queue="tuning-b",
        store=MemoryStore(),
        agents={},
        register_search_attribute=False,
    )
    config = worker.config()
    assert config.get("max_concurrent_activities") == DEFAULT_MAX_CONCURRENT_ACTIVITIES == 100
    assert config.get("max_concurrent_workflow_tasks") == DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS
    assert config.get("max_cached_workflows") == DEFAULT_MAX_CACHED_WORKFLOWS == 1000


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrent_activities": 0},
        {"max_concurrent_workflow_tasks": 1},
        {"max_cached_workflows": -1},
        {"known_entries": -1},
        {"max_concurrent_activities": "10"},
        {"live_every": 0.0},
        {"live_every": 60.0},
        {"live_every": float("nan")},
    ],
)
async def test_bad_limits_raise_value_error(
    temporal_client: Client, limits: dict[str, object]
) -> None:
    with pytest.raises(ValueError, match="must be"):
        await create_worker(
            temporal_client,
            task_queue="tuning-c",
            store=MemoryStore(),
            agents={},
            register_search_attribute=False,
            **limits,  # type: ignore[arg-type]  # bad values on purpose
        )


@pytest.mark.parametrize(
    "value", [ScriptedModel(["hi"]), "openai:gpt-4.1-mini", {"model": "openai:gpt-4.1-mini"}]
)
async def test_an_agent_that_is_not_an_agent_spec_is_refused_at_once(
    temporal_client: Client, value: object
) -> None:
    """A model (or its spec) where an AgentSpec belongs used to start a worker whose every run
    retried an AttributeError forever; it is a TypeError naming the agent, before anything
    connects."""
    with pytest.raises(TypeError, match=r"agents\['weather'\] must be an AgentSpec"):
        await create_worker(
            temporal_client,
            task_queue="tuning-d",
            store=MemoryStore(),
            agents={"weather": value},  # type: ignore[dict-item]  # the slip, on purpose
            register_search_attribute=False,
        )


@pytest.mark.parametrize(
    ("options", "field", "problem"),
    [
        ({"max_turns": 0}, "options.max_turns", "greater than or equal to 1"),
        ({"max_turns": "ten"}, "options.max_turns", "integer"),
        ({"approval_wait": -1.0}, "options.approval_wait", "greater than or equal to 0"),
        ({"approval_wait": float("inf")}, "options.approval_wait", "finite"),
        ({"system_prompt": 3}, "options.system_prompt", "string"),
        ({"model_options": ["t", 0.2]}, "options.model_options", "dictionary"),
        ({"tools": ["send_email"]}, "options.tools.0", "Tool"),
    ],
)
async def test_an_agent_spec_no_run_could_use_is_refused_when_it_is_made(
    options: dict[str, Any], field: str, problem: str
) -> None:
    """As ``new()`` refuses them: one line naming the option, an ``InvalidRunInputError``,
    when the spec is made (a worker or a server in process registers none); it was made, and
    every run of the agent failed as it started (a 500 with pydantic's report in process)."""
    with pytest.raises(InvalidRunInputError) as caught:
        AgentSpec(model=ScriptedModel([]), **options)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)
    made = AgentSpec(model=ScriptedModel([]))
    with pytest.raises(InvalidRunInputError):
        dataclasses.replace(made, **options)
