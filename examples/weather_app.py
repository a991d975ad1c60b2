"""A minimal worker app: one agent with one tool, on a real model when a key is set.

Serve it with:

    durable-agent worker --app examples/weather_app.py:app --task-queue weather

then talk to it from anywhere that reaches the same Temporal and store:

    durable-agent run my-session "Weather in Lisbon?" --agent weather --task-queue weather

The worker builds the model client (and reads the API key) itself; clients only name the agent,
so keys and tool code never travel through Temporal.
"""

from __future__ import annotations

import os

from durable_agent import ScriptedModel, tool
from durable_agent.ai import LanguageModel, Reply
from durable_agent.ai.model import ModelRequest
from durable_agent.cli import App
from durable_agent.workflows import AgentSpec


@tool
async def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"{city}: 21°C and sunny"  # call your weather API here


def _offline(request: ModelRequest) -> Reply:
    """Without a key: call the tool once, then report what it said."""
    last = request.messages[-1]
    if last.role == "tool_result":
        return Reply(text=f"Here you go: {last.text()}")
    return Reply.call("get_weather", {"city": "Lisbon"}, id=f"call-{len(request.messages)}")


def _model() -> LanguageModel:
    if os.environ.get("OPENAI_API_KEY"):
        from durable_agent.ai.providers import resolve_model

        return resolve_model("openai:gpt-4.1-mini")
    return ScriptedModel(_offline)


def app() -> App:
    """Called in the worker process, so the model client is built where the key lives."""
    return App(
        agents={
            "weather": AgentSpec(
                model=_model(),
                tools=(get_weather,),
                system_prompt="Answer weather questions with the get_weather tool.",
            )
        },
        task_queue="weather",
    )
