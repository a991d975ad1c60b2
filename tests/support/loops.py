"""What the inner-loop tests share (tests/test_agent_loop.py, tests/test_agent_tools.py): a loop
over a scripted model with fast retries, event readers, an ``echo`` tool."""

from __future__ import annotations

from typing import Any

from durable_agent.agent import AgentEvent, AgentOptions, AgentRun, ModelLoop, model
from durable_agent.ai import RetryPolicy, ScriptedModel, tool

FAST = RetryPolicy(max_attempts=3, initial_interval=0)


def types(events: list[AgentEvent]) -> list[str]:
    return [e.type for e in events]


def without_updates(events: list[AgentEvent]) -> list[str]:
    return [t for t in types(events) if t not in ("message_update", "tool_execution_update")]


def loop_for(script: Any, **options: Any) -> tuple[ScriptedModel, ModelLoop]:
    lm = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    options.setdefault("model_retry", FAST)
    loop = model(lm)(AgentOptions(**options))
    assert isinstance(loop, ModelLoop)
    return lm, loop


async def collect(run: AgentRun) -> list[AgentEvent]:
    return [e async for e in run.events()]


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"
