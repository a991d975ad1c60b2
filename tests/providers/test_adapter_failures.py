"""Failures both adapters meet the same way, through the real SDKs against the replay server:
a stream that breaks, is cut or ends early fails retryably with the events streamed so far; a
429 is retryable and the same request succeeds after it; a timeout and a refused connection are
retryable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_agent.agent import AgentOptions
from durable_agent.agent import model as model_loop
from durable_agent.ai import tool, user_message
from durable_agent.ai.providers.adapter import StreamingAdapter

from .adapters import ADAPTERS, Adapter, hello
from .conftest import collect, failure
from .replay_server import RecordedResponse, ReplayServer


@pytest.fixture(params=ADAPTERS, ids=[a.name for a in ADAPTERS])
def adapter(request: pytest.FixtureRequest) -> Adapter:
    chosen: Adapter = request.param
    return chosen


@pytest.fixture
async def model(adapter: Adapter, replay: ReplayServer) -> AsyncIterator[StreamingAdapter[Any]]:
    lm = adapter.make(replay.url, 10)
    yield lm
    await lm.aclose()


async def test_a_malformed_stream_fails_retryably(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    replay.enqueue(f"{adapter.name}/malformed.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == f"{adapter.name}: malformed stream: an event is not valid JSON"
    assert seen == ["start", "text_delta"]


async def test_a_stream_cut_mid_message_fails_retryably(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    replay.enqueue(f"{adapter.name}/cut.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == f"{adapter.name}: connection failed (RemoteProtocolError)"
    assert seen == ["start", "text_delta"]


async def test_a_stream_that_ends_without_finishing_fails_retryably(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    replay.enqueue(f"{adapter.name}/ended_early.http")

    error, seen = await failure(model, hello())

    assert error.retryable and str(error) == adapter.ended_early
    assert seen == ["start", "text_delta"]


NO_USAGE = {
    "openai": ["openai/no_usage.http", "openai/no_usage_no_done.http"],
    "anthropic": ["anthropic/no_usage.http"],
}
"""Replies that came whole but whose stream ended before the usage: OpenAI's finish_reason
chunk with no usage chunk after it (then ``[DONE]``, or the end of the body), Anthropic's
``message_stop`` with no ``message_delta`` before it."""


async def test_a_stream_that_ends_before_its_usage_fails_retryably(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    # Usage is what a user bills by: a reply taken with zero usage because its last event never
    # came is a truncated stream, retried as one cut before its end is.
    for fixture in NO_USAGE[adapter.name]:
        replay.enqueue(fixture)

        error, seen = await failure(model, hello())

        assert error.retryable and str(error) == adapter.no_usage, fixture
        assert seen == ["start", "text_delta", "text_delta", "text_delta"]


async def test_rate_limit_then_success(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    replay.enqueue(f"{adapter.name}/rate_limited.http", f"{adapter.name}/text.http")

    error, seen = await failure(model, hello())
    events = await collect(model, hello())

    assert error.retryable and error.retry_after == 7.0
    assert str(error).startswith(adapter.rate_limited)
    assert seen == []
    assert events[-1].message.text() == "Hello, world!"
    first, second = replay.requests
    assert first.json() == second.json()


async def test_a_timeout_is_retryable(adapter: Adapter, replay: ReplayServer) -> None:
    replay.enqueue(RecordedResponse(200, "OK", (), b"", hang=True))
    lm = adapter.make(replay.url, 0.2)

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == f"{adapter.name}: request timed out"


async def test_a_refused_connection_is_retryable(adapter: Adapter, closed_port: int) -> None:
    lm = adapter.make(f"http://127.0.0.1:{closed_port}", 10)

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert error.retryable and str(error) == f"{adapter.name}: connection failed (ConnectError)"


@pytest.mark.parametrize("status", [200, 502])
async def test_a_body_that_does_not_decode_is_a_retryable_model_error(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any], status: int
) -> None:
    # A proxy that labels its answer gzip and sends something else (or a cut compressed body):
    # the transport's DecodingError is a failed exchange like a cut connection, not an untyped
    # httpx error escaping the ModelError contract.
    kind = "text/event-stream" if status == 200 else "text/html"
    headers = (("content-type", kind), ("content-encoding", "gzip"))
    replay.enqueue(RecordedResponse(status, "", headers, b"<html>not gzip</html>"))

    error, _ = await failure(model, hello())

    assert error.retryable
    assert str(error) == f"{adapter.name}: connection failed (DecodingError)"
    assert error.__cause__ is None and error.__context__ is None


async def test_bytes_that_are_not_utf8_in_the_stream_fail_retryably(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    # b"\xff\xfe" inside an event's data line: the body was damaged on its way, as a cut or
    # undecodable one is, so the call is worth making again, not final as a schema mismatch.
    replay.enqueue(f"{adapter.name}/not_utf8.http")

    error, seen = await failure(model, hello())

    assert error.retryable
    assert str(error) == f"{adapter.name}: malformed stream: an event is not UTF-8"
    assert error.__cause__ is None and error.__context__ is None
    assert seen == ["start", "text_delta"]


CUT_CALL = {"openai": "openai/length_tool_call.http", "anthropic": "anthropic/max_tokens.http"}
"""A reply cut at its token limit inside a ``write_file`` call: ``{"path": "notes.txt",
"text": "first li``."""


async def test_a_tool_call_cut_at_the_token_limit_is_not_run(
    adapter: Adapter, replay: ReplayServer, model: StreamingAdapter[Any]
) -> None:
    """Its arguments are what the model had written when the limit fell: running it would write
    a file of half a line (every field it names is there) and tell the model it went well. The
    reply is kept as cut (``length``), without the call; the run ends there, as a cut reply's."""
    written: list[tuple[str, str]] = []

    @tool
    async def write_file(path: str, text: str) -> str:
        """Write a file."""
        written.append((path, text))
        return "written"

    replay.enqueue(CUT_CALL[adapter.name])
    loop = model_loop(model)(AgentOptions(tools=(write_file,)))

    run = loop.run([user_message("Write my notes to notes.txt")])
    events = [event async for event in run.events()]

    assert written == []
    assert [e.type for e in events if e.type.startswith(("turn", "tool"))] == [
        "turn_start",
        "turn_end",
    ]
    [reply] = await run.wait()
    assert (reply.stop_reason, reply.tool_calls()) == ("length", [])
