"""The app ``durable-agent worker`` serves in the operations tests (its logs and its health).

``durable-agent worker --app tests/support/ops_app.py:app`` serves three agents:

- ``hello`` answers every question with ``Hello!``;
- ``flaky``'s first model call fails with a retryable :class:`ModelError` (a provider's 503), the
  retry answers: an expected error the worker logs in one line;
- ``broken``'s model raises a ``RuntimeError`` (a bug in a model adapter): an unexpected error,
  whose traceback the worker's log keeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from durable_agent import Reply, ScriptedModel
from durable_agent.ai import ModelError, ModelEvent, ModelRequest
from durable_agent.cli import App
from durable_agent.workflows import AgentSpec

__all__ = ["app"]


class BrokenModel:
    """A model adapter with a bug: every call raises something that is not a ModelError."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise RuntimeError("the adapter dropped its connection pool")
        yield  # pragma: no cover - makes this an async generator


def app() -> App:
    overloaded = ModelError("the provider is overloaded (503)", retryable=True)
    return App(
        agents={
            "hello": AgentSpec(model=ScriptedModel(lambda request: Reply(text="Hello!"))),
            "flaky": AgentSpec(
                model=ScriptedModel([Reply(error=overloaded), "Hello after a retry"])
            ),
            "broken": AgentSpec(model=BrokenModel()),
        }
    )
