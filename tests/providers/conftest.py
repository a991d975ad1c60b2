"""Fixtures for the provider tests: a replay server per test, the adapter a test module is about
on it, and helpers to drain a stream."""

from __future__ import annotations

import socket
import traceback
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from durable_agent.ai import LanguageModel, ModelError, ModelEvent, ModelRequest
from durable_agent.ai.providers.adapter import StreamingAdapter

from .replay_server import ReplayServer


@pytest.fixture
def replay() -> Iterator[ReplayServer]:
    """A started replay server; at teardown every queued response must have been requested and
    the server must have handled every request without failing."""
    with ReplayServer() as server:
        yield server
        assert server.pending == 0, f"{server.pending} queued responses were never requested"
        assert server.errors == []


@pytest.fixture
async def model(
    request: pytest.FixtureRequest, replay: ReplayServer
) -> AsyncIterator[StreamingAdapter[Any]]:
    """The adapter the test module is about (its ``ADAPTER``, a maker of :mod:`.adapters`) on the
    replay server, closed after the test."""
    lm: StreamingAdapter[Any] = request.module.ADAPTER(replay.url)
    yield lm
    await lm.aclose()


def header_values(headers: dict[str, str]) -> str:
    """Every header's value, one a line (where a key must, or must not, appear)."""
    return "\n".join(headers.values())


@pytest.fixture
def closed_port() -> int:
    """A local port with nothing listening (bound, then released), for connection failures."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def collect(model: LanguageModel, request: ModelRequest) -> list[ModelEvent]:
    """Every event of one call, in order."""
    return [event async for event in model.stream(request)]


async def failure(model: LanguageModel, request: ModelRequest) -> tuple[ModelError, list[str]]:
    """The ModelError one call raises, and the types of the events streamed before it."""
    seen: list[str] = []
    with pytest.raises(ModelError) as info:
        async for event in model.stream(request):
            seen.append(event.type)
    return info.value, seen


def leaks(error: BaseException, secret: str) -> list[str]:
    """Every rendering of ``error`` that contains ``secret``: str, repr, args, the formatted
    traceback (which includes any chained cause or context), and the pickled form."""
    import pickle

    renderings = {
        "str": str(error),
        "repr": repr(error),
        "args": repr(error.args),
        "traceback": "".join(traceback.format_exception(error)),
        "pickle": repr(pickle.dumps(error)),
    }
    return [name for name, text in renderings.items() if secret in text]
