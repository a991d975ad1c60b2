"""What the figures of ``temporal_bench.py`` share: the scripted models, the no-op tool, the gated
model wrapper, the agent worker and the number formatting.

Every reply and tool result is equal-sized (``FILLER``, fixed usage), so per-turn history and
latency figures compare like with like across turns and across revisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_agent import tool
from durable_agent.ai import ModelEvent, ModelRequest, Reply, ScriptedModel, ToolCall, Usage
from durable_agent.session import Store
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, create_worker

__all__ = [
    "FILLER",
    "FIXED_USAGE",
    "TOOL_STARTS",
    "TRANSFER_RPS_KEY",
    "Gate",
    "InstrumentedModel",
    "agent_worker",
    "answer_script",
    "assistant_turns",
    "fmt",
    "make_store",
    "queue_name",
    "step",
    "tool_turns_script",
    "worker_options",
]

TRANSFER_RPS_KEY = "history.transferProcessorMaxPollRPS"

FIXED_USAGE = Usage(input=1000, output=100)
FILLER = "lorem ipsum dolor sit amet " * 8  # 216 chars: every reply carries some text


def fmt(s: dict[str, float], unit: str = "ms", scale: float = 1000.0, digits: int = 1) -> str:
    """A ``_stats.summary`` as ``median (min..max, n=N)``."""
    m, lo, hi = s["median"] * scale, s["min"] * scale, s["max"] * scale
    return f"{m:.{digits}f} {unit} ({lo:.{digits}f}..{hi:.{digits}f}, n={int(s['n'])})"


# -- models and tools --------------------------------------------------------------------------


def assistant_turns(request: ModelRequest) -> int:
    """Assistant messages since the last user message (this run's turns so far)."""
    n = 0
    for m in reversed(request.messages):
        if m.role == "user":
            break
        if m.role == "assistant":
            n += 1
    return n


def tool_turns_script(tool_turns: int) -> Callable[[ModelRequest], Reply]:
    """Call ``step`` on each of turns 1..tool_turns, answer at the next; equal-sized replies."""

    def respond(request: ModelRequest) -> Reply:
        turn = assistant_turns(request) + 1
        if turn <= tool_turns:
            return Reply(
                text=f"turn {turn:04d} {FILLER}",
                tool_calls=[ToolCall(id=f"call-{turn:04d}", name="step", arguments={"k": turn})],
                usage=FIXED_USAGE,
                chunk_size=64,
            )
        return Reply(text=f"done {turn:04d} {FILLER}", usage=FIXED_USAGE, chunk_size=64)

    return respond


def answer_script(request: ModelRequest) -> Reply:
    """One text answer per user message, equal-sized."""
    n = sum(1 for m in request.messages if m.role == "user")
    return Reply(text=f"answer {n:04d} {FILLER}", usage=FIXED_USAGE, chunk_size=64)


TOOL_STARTS: list[float] = []


@tool
async def step(k: int) -> str:
    """A no-op tool with an equal-sized result."""
    TOOL_STARTS.append(time.perf_counter())
    return f"ok {k:04d}"


class Gate:
    """Holds each model call until the benchmark has looked at the history."""

    def __init__(self) -> None:
        self.entered: asyncio.Queue[int] = asyncio.Queue()
        self.release: asyncio.Queue[None] = asyncio.Queue()


class InstrumentedModel:
    """Wraps a ScriptedModel: records when each call starts, optionally waits on a gate."""

    def __init__(self, inner: ScriptedModel, gate: Gate | None = None) -> None:
        self.inner = inner
        self.gate = gate
        self.starts: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.starts.append(time.perf_counter())
        if self.gate is not None:
            self.gate.entered.put_nowait(assistant_turns(request) + 1)
            await self.gate.release.get()
        async for event in self.inner.stream(request):
            yield event


# -- workers and stores ------------------------------------------------------------------------


def worker_options(passthrough: bool) -> dict[str, Any]:
    """``--passthrough``: share ``durable_agent`` with the workflow sandbox instead of letting it
    re-import the package for every workflow run (not what ``create_worker`` does by default)."""
    if not passthrough:
        return {}
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    restrictions = SandboxRestrictions.default.with_passthrough_modules("durable_agent")
    return {"workflow_runner": SandboxedWorkflowRunner(restrictions=restrictions)}


def queue_name(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def agent_worker(
    client: Client, store: Store, agents: dict[str, AgentSpec], passthrough: bool
) -> AsyncIterator[str]:
    """An in-process ``create_worker`` worker on a fresh task queue (yielded)."""
    queue = queue_name("agent")
    worker = await create_worker(
        client,
        task_queue=queue,
        store=store,
        agents=agents,
        workflow_failure_exception_types=[Exception],
        **worker_options(passthrough),
    )
    async with worker:
        yield queue


def make_store(kind: str, root: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    return FileStore(root)
