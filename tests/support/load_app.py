"""The app ``durable-agent worker`` serves in the load benchmark and the worker-kill test.

``durable-agent worker --app tests/support/load_app.py:app --store mongodb://…`` serves agent
``load``: a ScriptedModel whose answer is a pure function of the request (so any worker process,
and any retry, answers a turn the same way), waiting ``$DURABLE_AGENT_LOAD_LATENCY`` seconds
(default 0.2) per call like a provider would. The user text of turn *k* is ``turn k``; every third
turn (3, 6, …) the model first calls tool ``lookup`` (id ``call-k``), then answers ``answer k``.
A turn is therefore two model calls and one tool call on tool turns, one model call otherwise.
With ``$DURABLE_AGENT_LOAD_STATS`` set, the process counts its Mongo ops and activity waits there
(:mod:`tests.support.worker_stats`).
"""

from __future__ import annotations

import os

from durable_agent import Reply, ScriptedModel, ToolCall, tool
from durable_agent.ai import ModelRequest
from durable_agent.cli import App
from durable_agent.workflows import AgentSpec
from tests.support.worker_stats import note_activity_start, start_from_env

__all__ = ["AGENT", "LATENCY_ENV", "answer_text", "app", "is_tool_turn", "turn_text"]

AGENT = "load"
LATENCY_ENV = "DURABLE_AGENT_LOAD_LATENCY"


def turn_text(k: int) -> str:
    return f"turn {k}"


def answer_text(k: int) -> str:
    return f"answer {k}"


def is_tool_turn(k: int) -> bool:
    return k % 3 == 0


def responder(latency: float) -> ScriptedModel:
    def respond(request: ModelRequest) -> Reply:
        note_activity_start("model")
        last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=0)
        text = request.messages[last_user].text() if request.messages else ""
        k = int(text.split()[-1]) if text.startswith("turn ") else 0
        answered = any(m.role == "tool_result" for m in request.messages[last_user:])
        if is_tool_turn(k) and not answered:
            call = ToolCall(id=f"call-{k}", name="lookup", arguments={"turn": k})
            return Reply(tool_calls=[call], delay=latency)
        return Reply(text=answer_text(k), delay=latency)

    return ScriptedModel(respond)


@tool
async def lookup(turn: int) -> str:
    """Look something up for a turn (instant: the model latency is what a turn waits on)."""
    note_activity_start("tool")
    return f"looked up {turn}"


def app() -> App:
    """Built in the worker process (the latency comes from its environment)."""
    latency = float(os.environ.get(LATENCY_ENV, "0.2"))
    start_from_env()  # before the worker opens its store, so the store's client is counted
    spec = AgentSpec(model=responder(latency), tools=[lookup], max_turns=10)
    return App(agents={AGENT: spec}, description="load benchmark agent")
