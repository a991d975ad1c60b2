"""A tool that holds its call until the test releases it.

Tests that act while a run is busy (close, cancel, a second ``run``, a query, attaching to the same
run) need the run parked at a point they control: between the tool's start and its result. The
model script calls the tool by its ``name`` (``Reply.call("gate", id="g1")``); the test awaits
``started``, does what it checks, then sets ``release`` (or never does, for a call that must be
cancelled). Events are in-process, so the tool must run in the test's process (every in-process
executor, and a Temporal worker started by the test).
"""

from __future__ import annotations

import asyncio

from durable_agent.ai import Tool, tool

__all__ = ["GateTool"]


class GateTool:
    """``tool`` sets ``started`` as a call begins and returns ``result`` once ``release`` is set."""

    def __init__(self, name: str = "gate", result: str = "opened") -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        started, release = self.started, self.release

        @tool(name=name)
        async def hold() -> str:
            """Waits for the test to release it."""
            started.set()
            await release.wait()
            return result

        self.tool: Tool = hold
