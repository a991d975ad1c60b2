"""A two-turn conversation with tools through each provider adapter, as a durable agent.

The model is built by ``resolve_model`` from a spec and an environment, so the real ``openai`` or
``anthropic`` SDK talks over a socket to the replay server. The agent runs in-process and on the
Temporal executor (a real worker in this process, its model and tool calls activities). Turn 1 asks
for the weather and the time; the recorded reply calls ``get_weather`` and ``get_time``, their
results go back, and the model answers. Turn 2 runs on a handle reopened from the store and gets
the next recorded reply.

Checked: the store holds the one chain user, assistant (tool calls), both results in call order,
assistant, user, assistant; the run receipts are exactly the stored entries; each request the
server received carries the history converted for its provider (the tool results as that API takes
them, and on turn 2 the whole conversation, Anthropic's thinking signature included); and the API
key is sent to the provider but never enters a workflow history or the store.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import Agent, Event, Message, MessageEntry, ModelError, Tool, model, new, tool
from durable_agent.ai import LanguageModel, TextContent, ThinkingContent, ToolCall
from durable_agent.ai.providers import AnthropicModel, OpenAIChatModel, resolve_model
from durable_agent.ai.tools import RetryPolicy
from durable_agent.session import Entry, Store, encode_entry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, run_workflow_id
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import history_text

from .replay_server import ReceivedRequest, RecordedResponse, ReplayServer

SYSTEM = "You are a concise travel assistant."
FIRST = "What's the weather and time in Paris?"
SECOND = "Thanks! Should I take an umbrella?"
WEATHER = "18°C, cloudy in Paris"
TIME = "14:03 in Europe/Paris"
ANSWER = "Hello, world!"
"""The text of ``text.http``: the final reply of turn 1 and the reply of turn 2."""

THINKING = "The user wants the weather in Paris and the local time. I'll call both tools."
SIGNATURE = (
    "EqQBCkYIBxgCKkCzAYZIjLm9Hl8QeV3u1cYd0FkTqPbWd6sYRj0aH7LzUoGvN2mXhK4tJ9cQrE1wS5uIpA8nB3fD6gM2y"
    "ZxAEgwVb7nQpT3kLm9sR4cYBSIMx9wq2Ez5aFhJ3kTuIjD0pWqR8vN1cL6mY4bS7hX2eKz9gA=="
)
"""The thinking and its signature streamed by ``anthropic/thinking_tool_use.http``."""


# -- tools ---------------------------------------------------------------------------------------


@dataclass
class Tools:
    tools: list[Tool]
    finished: list[str]
    """Tool names in the order their handlers returned."""


def weather_tools() -> Tools:
    """``get_weather`` and ``get_time``, run concurrently (both are parallel-safe), with
    ``get_weather`` finishing only after ``get_time``: the results are stored in call order, not
    in completion order. No retries, so a tool that fails shows up at once as an error result."""
    finished: list[str] = []
    time_told = asyncio.Event()
    once = RetryPolicy(max_attempts=1)

    @tool(retry=once, timeout=20)
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        await asyncio.wait_for(time_told.wait(), 10)  # fails the call if not run concurrently
        finished.append("get_weather")
        return f"18°C, cloudy in {city}"

    @tool(retry=once, timeout=20)
    async def get_time(tz: str) -> str:
        """Current local time in an IANA time zone."""
        finished.append("get_time")
        time_told.set()
        return f"14:03 in {tz}"

    return Tools([get_weather, get_time], finished)


# -- what each provider sends --------------------------------------------------------------------


def check_openai_requests(requests: Sequence[ReceivedRequest], key: str, tools: list[Tool]) -> None:
    weather_id, time_id = "call_Wx7kQ2", "call_Pz4mR9"
    system = {"role": "system", "content": SYSTEM}
    ask = {"role": "user", "content": FIRST}
    calls = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": weather_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            },
            {
                "id": time_id,
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
            },
        ],
    }
    # One "tool" message per result, in call order.
    results = [
        {"role": "tool", "tool_call_id": weather_id, "content": WEATHER},
        {"role": "tool", "tool_call_id": time_id, "content": TIME},
    ]
    answer = {"role": "assistant", "content": ANSWER}
    follow_up = {"role": "user", "content": SECOND}
    histories = [
        [system, ask],
        [system, ask, calls, *results],
        [system, ask, calls, *results, answer, follow_up],
    ]
    schemas = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.spec.parameters,
            },
        }
        for t in tools
    ]
    assert [(r.method, r.path) for r in requests] == [("POST", "/v1/chat/completions")] * 3
    for sent, messages in zip(requests, histories, strict=True):
        assert sent.headers["authorization"] == f"Bearer {key}"
        assert sent.json() == {
            "model": "gpt-4.1-mini",
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
            "messages": messages,
            "tools": schemas,
        }


ANTHROPIC_THINKING = {"type": "enabled", "budget_tokens": 1024}


def check_anthropic_requests(
    requests: Sequence[ReceivedRequest], key: str, tools: list[Tool]
) -> None:
    weather_id, time_id = "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "toolu_01Hq7Vb3Nc5Xm8Zk2Lp4Rt9Y"
    ask = {"role": "user", "content": [{"type": "text", "text": FIRST}]}
    calls = {
        "role": "assistant",
        "content": [
            # Sent back exactly as streamed, after a round trip through the store.
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "text", "text": "Let me check both."},
            {
                "type": "tool_use",
                "id": weather_id,
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {
                "type": "tool_use",
                "id": time_id,
                "name": "get_time",
                "input": {"tz": "Europe/Paris"},
            },
        ],
    }
    # Both results in one user message, in call order.
    results = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": weather_id,
                "content": [{"type": "text", "text": WEATHER}],
            },
            {
                "type": "tool_result",
                "tool_use_id": time_id,
                "content": [{"type": "text", "text": TIME}],
            },
        ],
    }
    answer = {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}
    follow_up = {"role": "user", "content": [{"type": "text", "text": SECOND}]}
    histories = [[ask], [ask, calls, results], [ask, calls, results, answer, follow_up]]
    schemas = [
        {"name": t.name, "description": t.description, "input_schema": t.spec.parameters}
        for t in tools
    ]
    assert [(r.method, r.path) for r in requests] == [("POST", "/v1/messages")] * 3
    for sent, messages in zip(requests, histories, strict=True):
        assert key in "\n".join(sent.headers.values())  # the header depends on the SDK version
        assert sent.json() == {
            "model": "claude-sonnet-4-6",
            "max_tokens": 2048,
            "stream": True,
            "system": SYSTEM,
            "thinking": ANTHROPIC_THINKING,
            "messages": messages,
            "tools": schemas,
        }


@dataclass(frozen=True)
class Provider:
    spec: str
    api: str
    replies: tuple[str, ...]
    """The recorded responses: turn 1's tool calls and answer, then turn 2's reply."""
    calling: list[Any]
    """The content of the stored assistant message that calls the tools."""
    model_options: dict[str, Any]
    env: Callable[[str, str], dict[str, str]]
    """The environment a worker would have: ``(replay server URL, API key) -> env``."""
    check_requests: Callable[[Sequence[ReceivedRequest], str, list[Tool]], None]


PROVIDERS = {
    "openai": Provider(
        spec="openai:gpt-4.1-mini",
        api="openai-chat",
        replies=("openai/tool_calls.http", "openai/text.http", "openai/text.http"),
        calling=[
            ToolCall(id="call_Wx7kQ2", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_Pz4mR9", name="get_time", arguments={"tz": "Europe/Paris"}),
        ],
        model_options={"temperature": 0},
        env=lambda url, key: {"OPENAI_API_KEY": key, "OPENAI_BASE_URL": f"{url}/v1"},
        check_requests=check_openai_requests,
    ),
    "anthropic": Provider(
        spec="anthropic:claude-sonnet-4-6",
        api="anthropic-messages",
        replies=(
            "anthropic/thinking_tool_use.http",
            "anthropic/text.http",
            "anthropic/text.http",
        ),
        calling=[
            ThinkingContent(thinking=THINKING, signature=SIGNATURE),
            TextContent(text="Let me check both."),
            ToolCall(
                id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                name="get_weather",
                arguments={"city": "Paris"},
            ),
            ToolCall(
                id="toolu_01Hq7Vb3Nc5Xm8Zk2Lp4Rt9Y",
                name="get_time",
                arguments={"tz": "Europe/Paris"},
            ),
        ],
        model_options={"max_tokens": 2048, "thinking": ANTHROPIC_THINKING},
        env=lambda url, key: {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": url},
        check_requests=check_anthropic_requests,
    ),
}


# -- executors -----------------------------------------------------------------------------------

Opener = Callable[[str], Awaitable[Agent]]
"""Open (create or resume) a handle on a session ID."""


@pytest.fixture(params=["local", pytest.param("temporal", marks=pytest.mark.temporal)])
def executor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def temporal(executor: str, request: pytest.FixtureRequest) -> Client | None:
    """The session's Temporal client, started only for the Temporal variant."""
    if executor == "local":
        return None
    client: Client = request.getfixturevalue("temporal_client")
    return client


@asynccontextmanager
async def agents(
    client: Client | None,
    store: Store,
    lm: LanguageModel,
    tools: list[Tool],
    options: dict[str, Any],
) -> AsyncIterator[Opener]:
    """Open handles in-process (``client`` is None) or on a Temporal worker in this process that
    has the model and tools registered as agent ``weather``."""
    if client is None:

        async def open_local(session_id: str) -> Agent:
            return await new(model(lm), store=store, session_id=session_id, tools=tools, **options)

        yield open_local
        return
    queue = f"test-{uuid.uuid4().hex[:12]}"
    spec = AgentSpec(model=lm, tools=tuple(tools))
    async with running_worker(client, store, {"weather": spec}, task_queue=queue):
        runner = TemporalExecutor(
            client, task_queue=queue, execution_timeout=timedelta(seconds=60), timeouts=FAST
        )

        async def open_remote(session_id: str) -> Agent:
            return await new(
                "weather", store=store, session_id=session_id, executor=runner, **options
            )

        yield open_remote


@dataclass
class Turn:
    run_id: str
    events: list[Event]
    messages: list[Message]

    def receipts(self) -> list[Entry]:
        return [entry for e in self.events if e.entries for entry in e.entries]


async def turn(agent: Agent, text: str) -> Turn:
    run_id = uuid.uuid4().hex[:16]
    stream = await agent.run(text, run_id=run_id)
    events = [event async for event in stream.events()]
    return Turn(run_id, events, await stream.wait())


# -- the test ------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
async def test_two_turns_with_tools_through_the_provider(
    provider: Provider,
    executor: str,
    temporal: Client | None,
    replay: ReplayServer,
    tmp_path: Path,
) -> None:
    key = f"sk-canary-{secrets.token_hex(12)}"  # made at run time: no source line holds it
    replay.enqueue(*provider.replies)
    lm = resolve_model(provider.spec, env=provider.env(replay.url, key), timeout=10)
    assert isinstance(lm, OpenAIChatModel | AnthropicModel)
    kit = weather_tools()
    store = FileStore(tmp_path / "sessions")
    session_id = f"weather-{uuid.uuid4().hex[:10]}"
    options = {"system_prompt": SYSTEM, "model_options": provider.model_options}

    try:
        async with agents(temporal, store, lm, kit.tools, options) as open_agent:
            agent = await open_agent(session_id)
            first = await turn(agent, FIRST)
            await agent.close()
            # Turn 2 on a handle reopened from the store: the history it sends is what was stored.
            again = await open_agent(session_id)
            assert again.leaf_id == first.receipts()[-1].id
            second = await turn(again, SECOND)
            await again.close()
    finally:
        await lm.aclose()

    # The store holds one chain, each message once, tool results in call order.
    stored = await store.load_entries(session_id)
    assert all(isinstance(e, MessageEntry) for e in stored)
    assert [e.parent_id for e in stored] == [None, *(e.id for e in stored[:-1])]
    assert len({e.id for e in stored}) == len(stored)
    messages = [e.message for e in stored if isinstance(e, MessageEntry)]
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
        "user",
        "assistant",
    ]
    ask, calling, weather, time, answer, follow_up, reply = messages
    assert ask.text() == FIRST and follow_up.text() == SECOND
    assert calling.content == provider.calling
    provider_name, model_id = provider.spec.split(":")
    assert (calling.api, calling.provider, calling.model) == (provider.api, provider_name, model_id)
    assert calling.stop_reason == "tool_use"
    [weather_call, time_call] = calling.tool_calls()
    assert (weather.tool_call_id, weather.tool_name) == (weather_call.id, "get_weather")
    assert (time.tool_call_id, time.tool_name) == (time_call.id, "get_time")
    assert (weather.content, time.content) == (
        [TextContent(text=WEATHER)],
        [TextContent(text=TIME)],
    )
    assert not weather.is_error and not time.is_error
    assert kit.finished == ["get_time", "get_weather"]  # completed in the other order
    for final in (answer, reply):
        assert (final.text(), final.stop_reason, final.api) == (ANSWER, "stop", provider.api)

    # The receipts are the stored entries, each once, in order; each names the new leaf.
    receipts = first.receipts() + second.receipts()
    assert [encode_entry(e) for e in receipts] == [encode_entry(e) for e in stored]
    for event in first.events + second.events:
        if event.entries:
            assert event.leaf_id == event.entries[-1].id
    assert first.messages == messages[1:5] and second.messages == messages[6:]
    assert [e.id for e in again.entries()] == [e.id for e in stored]

    # What the provider received: the tool results converted for it, then the whole history.
    provider.check_requests(replay.requests, key, kit.tools)

    # The key went to the provider only: never into the store or a workflow history.
    for path in (tmp_path / "sessions").rglob("*"):
        if path.is_file():
            assert key not in path.read_text("utf-8", "replace"), path
    if temporal is not None:
        histories = []
        for run in (first, second):
            handle = temporal.get_workflow_handle(run_workflow_id(session_id, run.run_id))
            histories.append(history_text((await handle.fetch_history()).to_json()))
        for run, text in zip((first, second), histories, strict=True):
            assert key not in text, f"the API key leaked into run {run.run_id}"
            assert "Bearer" not in text
        # the search reads the decoded payloads: what did travel is found
        assert WEATHER in histories[0] and SECOND in histories[1]


@pytest.mark.temporal
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
async def test_a_rejected_key_fails_the_run_once_and_is_nowhere_on_temporal(
    provider: Provider,
    temporal_client: Client,
    replay: ReplayServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real adapter's 401 that echoes the key (whole, a slice of it, the Authorization header
    base64-encoded) on the Temporal executor: the run fails with a non-retryable ModelError after
    one request, and no form of the key is in the error, the workflow history, the store or the
    worker's log. The key is not in the worker's environment, so only the adapter's own
    redaction stands between the provider's text and Temporal."""
    key = f"sk-canary-{secrets.token_hex(12)}"  # made at run time: no source line holds it
    echoed = "invalid key {{key}} (…{{key_middle}}…), header {{authorization_base64}}"
    body = {"type": "error", "error": {"type": "authentication_error", "message": echoed}}
    replay.enqueue(RecordedResponse.json(401, body, echo=True))
    lm = resolve_model(provider.spec, env=provider.env(replay.url, key), timeout=10)
    assert isinstance(lm, OpenAIChatModel | AnthropicModel)
    store = FileStore(tmp_path / "sessions")
    session_id = f"rejected-{uuid.uuid4().hex[:10]}"
    caplog.set_level(logging.DEBUG)

    try:
        async with agents(temporal_client, store, lm, [], {}) as open_agent:
            agent = await open_agent(session_id)
            run_id = uuid.uuid4().hex[:16]
            stream = await agent.run("hello", run_id=run_id)
            with pytest.raises(ModelError) as raised:
                await stream.wait()
            await agent.close()
            handle = temporal_client.get_workflow_handle(run_workflow_id(session_id, run_id))
            history = history_text((await handle.fetch_history()).to_json())
    finally:
        await lm.aclose()

    [sent] = replay.requests  # a rejected key is not retried
    assert key in "\n".join(sent.headers.values())  # the key was really in play
    error = raised.value
    assert not error.retryable and "HTTP 401 authentication_error" in str(error)
    assert "[redacted]" in str(error)
    forms = [key, key[len(key) // 2 - 10 : len(key) // 2 + 10], key.removeprefix("sk-")]
    stored = "\n".join(
        path.read_text("utf-8", "replace")
        for path in (tmp_path / "sessions").rglob("*")
        if path.is_file()
    )
    places = {"error": f"{error!s} {error!r}", "history": history, "store": stored}
    places["log"] = caplog.text
    for place, text in places.items():
        for form in forms:
            assert form not in text, f"the key leaked into the {place}"
        assert "Bearer" not in text and "QmVhcmVy" not in text, place  # header, or in base64
    assert "HTTP 401 authentication_error" in history  # the failure is there, redacted
