"""The executor harness: durable-agent scenarios written once, run on every executor.

A scenario asks the harness for an agent built from a scripted model, tools and options; the
local harness uses ``new(model(lm), ...)``; the Temporal harness (added with the executor) registers
the same model and tools as a named agent on a real worker and opens the handle with the Temporal
executor. Scenarios that need in-process-only features (custom factories, client publishers,
middleware) use ``new`` directly instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from durable_agent import Agent, ScriptedModel, Tool, model, new
from durable_agent.ai import Reply
from durable_agent.session import Store


class Harness(Protocol):
    name: str

    async def open(
        self,
        script: Sequence[Reply | str] | ScriptedModel,
        *,
        store: Store,
        session_id: str | None = None,
        tools: Sequence[Tool] = (),
        **options: Any,
    ) -> Agent:
        """A handle on ``session_id`` whose runs use a ScriptedModel with ``script``."""
        ...


class LocalHarness:
    name = "local"

    async def open(
        self,
        script: Sequence[Reply | str] | ScriptedModel,
        *,
        store: Store,
        session_id: str | None = None,
        tools: Sequence[Tool] = (),
        **options: Any,
    ) -> Agent:
        lm = script if isinstance(script, ScriptedModel) else ScriptedModel(list(script))
        return await new(
            model(lm), store=store, session_id=session_id, tools=tuple(tools), **options
        )
