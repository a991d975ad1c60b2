"""The app ``durable-agent worker`` serves in the operations tests (its logs and its health).

``durable-agent worker --app tests/support/ops_app.py:app`` serves these agents:

- ``hello`` answers every question with ``Hello!``;
- ``flaky``'s first model call fails with a retryable :class:`ModelError` (a provider's 503), the
  retry answers: an expected error the worker logs in one line;
- ``broken``'s model raises a ``RuntimeError`` (a bug in a model adapter): an unexpected error,
  whose traceback the worker's log keeps;
- ``settle`` calls ``settle``, a tool tried once (its effect must not happen twice) that says it
  started (``started`` in ``$OPS_TOOL_DIR``) and works until the test lets it finish (``release``
  there), then answers with what the tool returned: what a worker told to stop does with a call
  in flight;
- ``ponder`` calls ``lookup`` (a quick tool) for the question ``go``, then answers its result only
  once the test lets it (``answering`` in ``$OPS_TOOL_DIR`` while it waits for ``release``), and
  says ``quick`` to any other question: a run going with its turn's result stored;
- ``refunder`` calls ``refund``, which waits for a person's approval, and parks at once (its
  ``approval_wait`` is a tenth of a second): a decision then starts the run that goes on;
- ``careful`` calls ``refund`` too, waiting for the decision as long as a run waits, then thinks
  its result over as ``ponder`` does: an agent that works on once a person has decided.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from durable_agent import Reply, ScriptedModel, tool
from durable_agent.ai import ModelError, ModelEvent, ModelRequest, RetryPolicy
from durable_agent.cli import App
from durable_agent.workflows import AgentSpec

__all__ = ["app"]


class BrokenModel:
    """A model adapter with a bug: every call raises something that is not a ModelError."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise RuntimeError("the adapter dropped its connection pool")
        yield  # pragma: no cover - makes this an async generator


@tool(retry=RetryPolicy(max_attempts=1))
async def settle(amount: str) -> str:
    """Settle a payment: once only, so a worker's stop must not cut it short."""
    where = Path(os.environ["OPS_TOOL_DIR"])
    (where / "started").touch()
    while True:  # the payment's work, as long as the test needs it in flight
        if (where / "release").exists():
            return f"settled {amount}"
        await asyncio.sleep(0.05)


class PonderModel:
    """A model that thinks over a tool's result until the test releases it."""

    def __init__(self, script: Callable[[ModelRequest], Reply]) -> None:
        self.inner = ScriptedModel(script)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.messages[-1].role == "tool_result":
            where = Path(os.environ["OPS_TOOL_DIR"])
            (where / "answering").touch()
            while True:  # thinking, as long as the test needs the run going
                if (where / "release").exists():
                    break
                await asyncio.sleep(0.05)
        async for event in self.inner.stream(request):
            yield event


@tool(approval=True)
async def refund(amount: int) -> str:
    """Refund a payment, once a person approved it."""
    return f"refunded {amount}"


def _refund(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "tool_result":
        return Reply(text=f"done: {last.text()}")
    return Reply.call("refund", {"amount": 250}, id="refund-1")


@tool
async def lookup(q: str) -> str:
    """Look something up, at once."""
    return f"found {q}"


def _ponder(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "tool_result":
        return Reply(text=f"after thinking it over: {last.text()}")
    if last.text() == "go":
        return Reply.call("lookup", {"q": "x"}, id="lookup-1")
    return Reply(text="quick")


def _settle(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "tool_result":
        return Reply(text=f"{'failed' if last.is_error else 'done'}: {last.text()}")
    return Reply.call("settle", {"amount": "5 EUR"}, id="settle-1")


def app() -> App:
    overloaded = ModelError("the provider is overloaded (503)", retryable=True)
    return App(
        agents={
            "hello": AgentSpec(model=ScriptedModel(lambda request: Reply(text="Hello!"))),
            "flaky": AgentSpec(
                model=ScriptedModel([Reply(error=overloaded), "Hello after a retry"])
            ),
            "broken": AgentSpec(model=BrokenModel()),
            "settle": AgentSpec(model=ScriptedModel(_settle), tools=(settle,)),
            "ponder": AgentSpec(model=PonderModel(_ponder), tools=(lookup,)),
            "refunder": AgentSpec(model=ScriptedModel(_refund), tools=(refund,), approval_wait=0.1),
            "careful": AgentSpec(model=PonderModel(_refund), tools=(refund,)),
        }
    )
