"""The demo's worker app: one agent, ``demo``, with a quick tool, a deliberately slow one, and
``send_email``, whose every call waits for a person's approval.

``durable-agent worker --app durable_agent.cli.demo_app:app`` serves it from any directory. Without
an API key the model is a :class:`ScriptedModel` whose replies are a *function of the request*, so a
worker that replaces a killed one answers exactly as the dead one would have. With
``OPENAI_API_KEY``/``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` or ``DURABLE_AGENT_MODEL`` set, the
same agent runs on that model instead.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping

from ..ai import (
    LanguageModel,
    Message,
    ModelRequest,
    Reply,
    RetryPolicy,
    ScriptedModel,
    Tool,
    tool,
)
from ..durable import DEFAULT_COMPACT_PROMPT
from ..workflows import AgentSpec
from . import App
from .config import ENV_MODEL

__all__ = [
    "AGENT",
    "EMAIL_TOOL",
    "SLOW_TOOL",
    "app",
    "demo_spec",
    "model_choice",
    "respond",
]

AGENT = "demo"
SLOW_TOOL = "crunch_numbers"
EMAIL_TOOL = "send_email"
ENV_TOOL_SECONDS = "DURABLE_AGENT_DEMO_TOOL_SECONDS"
"""How long ``crunch_numbers`` works (default 3 s): long enough to kill a worker during it."""

SYSTEM_PROMPT = (
    "You are the durable-agent demo assistant. Be brief. Use get_weather for weather questions and "
    "crunch_numbers for sales figures; never invent numbers."
)

WEATHER = {
    "paris": "18°C, light rain",
    "lisbon": "24°C, sunny",
    "berlin": "12°C, overcast",
}
SALES = {"Q1": 1_102_300, "Q2": 1_190_750, "Q3": 1_284_500}


@tool
async def get_weather(city: str) -> str:
    """Current weather for a city (canned figures: the demo runs offline)."""
    return f"{city}: {WEATHER.get(city.strip().lower(), '20°C, clear')}"


@tool(name=EMAIL_TOOL, approval=True)
async def send_email(to: str, subject: str) -> str:
    """Send an email (the demo sends nothing: it reports what it would send). A person approves
    each call first (docs/design.md#approvals-and-steering)."""
    return f"email to {to} sent: {subject}"


def _where() -> str:
    """Which worker and attempt ran this tool: shown so the replacement's work is visible."""
    try:
        from temporalio import activity

        info = activity.info()
    except Exception:
        return f"in process {os.getpid()}"
    return f"on worker {os.getpid()}, attempt {info.attempt}"


@tool(
    name=SLOW_TOOL,
    timeout=120.0,
    retry=RetryPolicy(max_attempts=5, initial_interval=0.2, backoff=1.0, max_interval=1.0),
)
async def crunch_numbers(quarter: str) -> str:
    """Add up one quarter's sales across regions. Slow on purpose: it stands for real work
    (a report, a long API call) during which a worker can die."""
    await asyncio.sleep(float(os.environ.get(ENV_TOOL_SECONDS, "3")))
    q = quarter.strip().upper()
    if q not in SALES:
        return f"no figures for {q}: the quarter is not closed ({_where()})"
    return f"{q} total: {SALES[q]:,} EUR across 3 regions ({_where()})"


def _last_user(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text()
    return ""


def _facts(messages: list[Message]) -> list[str]:
    return [m.text().split(" (")[0] for m in messages if m.role == "tool_result"]


def _call(request: ModelRequest, name: str, **arguments: str) -> Reply:
    # Deterministic per request, so a retried model call proposes the same call.
    return Reply.call(name, arguments, id=f"call-{len(request.messages)}")


def _text(text: str) -> Reply:
    """About 130 characters a second (some 33 tokens), a hosted model's pace: slow enough that
    the reply visibly streams, and that its live deltas reach the client before it is stored."""
    return Reply(text=text, chunk_size=4, chunk_delay=0.03)


def _weather_reply(result: str) -> Reply:
    """Answer from the tool result (``"Lisbon: 24°C, sunny"``), about the city that was asked."""
    city, _, report = result.partition(": ")
    advice = " Take an umbrella." if "rain" in report else ""
    return _text(
        f"Right now it is {report or 'unknown'} in {city}.{advice} That is the current reading "
        "from the weather tool; ask again later for an update."
    )


def _sales_reply(result: str) -> Reply:
    """Answer from the tool result (``"Q2 total: 1,190,750 EUR ..."``), compared with the
    quarter before it."""
    quarter = result.split(" ", 1)[0]
    previous = f"Q{int(quarter[1]) - 1}" if quarter in SALES and quarter != "Q1" else None
    if previous is None or previous not in SALES:
        trend = "It is the first quarter of the year."
    else:
        change = (SALES[quarter] - SALES[previous]) / SALES[previous] * 100
        trend = f"That is {'up' if change >= 0 else 'down'} {abs(change):.1f}% on {previous}."
        if SALES[quarter] == max(SALES.values()):
            trend += " The best quarter so far this year."
    return _text(f"Done. {result}. {trend}")


def _about_sales(lowered: str) -> bool:
    return any(w in lowered for w in ("crunch", "numbers", "sales", "figures", "revenue"))


def _email(request: ModelRequest, question: str) -> Reply:
    """``send_email`` to whoever the question names (``to the board``), the team by default."""
    to = re.search(r"\bto the (\w+)", question.lower())
    return _call(
        request, EMAIL_TOOL, to=f"{to.group(1) if to else 'team'}@example.com", subject=question
    )


def respond(request: ModelRequest) -> Reply:
    """The scripted model: a pure function of the conversation it is shown, whose answers follow
    the question (the city asked about, the quarter asked about)."""
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "tool_result":
        result = last.text().split(" (")[0]
        if last.tool_name == EMAIL_TOOL:
            if last.is_error:
                return _text(f"I did not send it ({result}).")
            return _text(f"Done: {result.rstrip('.')}.")
        if last.tool_name == "get_weather":
            return _weather_reply(result)
        return _sales_reply(result)
    question = _last_user(request)
    lowered = question.lower()
    if question.startswith(DEFAULT_COMPACT_PROMPT[:30]):
        asked = [m.text() for m in request.messages[:-1] if m.role == "user"]
        facts = _facts(request.messages)
        return _text(
            "Summary: the user asked "
            + "; ".join(f"“{q}”" for q in asked)
            + ". Known facts: "
            + ("; ".join(facts) if facts else "none")
            + "."
        )
    if "email" in lowered:
        return _email(request, question)
    if "weather" in lowered:
        city = re.search(r"\b(?:in|for|at) ([A-Z][a-zA-Z]+)", question)
        return _call(request, "get_weather", city=city.group(1) if city else "Paris")
    quarter = re.search(r"\bQ([1-4])\b", question, re.IGNORECASE)
    if _about_sales(lowered):
        if quarter is None:
            return _text(f"Which quarter? I have closed figures for {', '.join(SALES)}.")
        q = f"Q{quarter.group(1)}"
        if q in SALES:
            return _call(request, SLOW_TOOL, quarter=q)
        return _text(
            f"{q} is not closed yet, so there is nothing to crunch. Ask me again in January."
        )
    if "note" in lowered or "team" in lowered:
        facts = _facts(request.messages) or ["nothing new"]
        return _text("Note for the team: " + "; ".join(facts) + ".")
    if "know" in lowered or "remember" in lowered:
        first = request.messages[0].text() if request.messages else ""
        if first.startswith("Summary:"):
            return _text("From my compacted notes: " + first.removeprefix("Summary: "))
        facts = _facts(request.messages)
        return _text("So far: " + "; ".join(facts) + "." if facts else "Nothing yet.")
    if re.search(r"\b(hi|hello|hey)\b|what can you do", lowered):
        return _text(
            "Hello! I am a durable agent. I can check the weather and crunch quarterly sales, "
            "and every message you see has already been stored, so this conversation survives "
            "crashes."
        )
    return _text(
        "I can only check the weather and crunch quarterly sales in this demo: try “What's the "
        "weather in Lisbon?” or “What were Q2 sales?”."
    )


def model_choice(env: Mapping[str, str] | None = None) -> str | None:
    """The model spec a real run would use, from the environment; None means scripted."""
    env = os.environ if env is None else env
    if env.get(ENV_MODEL):
        return env[ENV_MODEL]
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        return "openai:gpt-4.1-mini"
    if env.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-3-5-haiku-latest"
    return None


def _model(env: Mapping[str, str] | None = None) -> LanguageModel:
    spec = model_choice(env)
    if spec is None:
        return ScriptedModel(respond, model="demo-1")
    from ..ai.providers import resolve_model

    return resolve_model(spec, env=env)


TOOLS: tuple[Tool, ...] = (get_weather, crunch_numbers, send_email)


def demo_spec(env: Mapping[str, str] | None = None) -> AgentSpec:
    """The ``demo`` agent as the worker (and the demo's in-process first turn) runs it."""
    return AgentSpec(model=_model(env), tools=TOOLS, system_prompt=SYSTEM_PROMPT, max_turns=8)


def app() -> App:
    """Called by the worker in its own process, so the model is built where the keys are."""
    return App(agents={AGENT: demo_spec()}, description="the durable-agent demo agent")
