"""Running one turn's tool calls: concurrently when every called tool allows it, results in call
order, each call decided by a person first when it needed approval.

A denied call is answered with ``tool call denied[: <reason>]`` without running, with the same
``tool_execution_start``/``tool_execution_end`` events as a call that ran, so a UI pairs them
(docs/design.md#approvals-and-steering); an approved one runs with the decision's edited
arguments, if any.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Generic, TypeVar

from ..ai.messages import Message, ToolCall
from ..ai.tools import Tool
from .approval import Verdict, denied_result
from .events import AgentEvent, tool_end, tool_start
from .hooks import call_hook
from .options import AgentOptions
from .tool_exec import ToolExecutor, TurnPlanner

__all__ = ["closing", "run_tools"]

T = TypeVar("T")


async def _execute_one(
    options: AgentOptions,
    executor: ToolExecutor,
    call: ToolCall,
    tool: Tool | None,
    report: Callable[[str], Awaitable[None]],
) -> Message:
    hooks = options.hooks
    if hooks is not None:
        replaced = await call_hook(hooks.before_tool, call)
        if isinstance(replaced, Message):
            return replaced
        if isinstance(replaced, ToolCall):
            call = replaced
    result = await executor.execute(tool, call, report)
    if hooks is not None:
        result = await call_hook(hooks.after_tool, call, result) or result
    return result


class _Turn:
    """The tasks of one turn's calls and the queue their progress reports arrive on."""

    def __init__(
        self,
        options: AgentOptions,
        executor: ToolExecutor,
        calls: list[ToolCall],
        verdicts: Mapping[str, Verdict],
    ) -> None:
        self.options = options
        self.executor = executor
        self.verdicts = verdicts
        self.calls = [verdicts[c.id].apply(c) if c.id in verdicts else c for c in calls]
        self.tools = [options.tool(c.name) for c in self.calls]
        self.updates: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
        self.results: dict[int, Message] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}

    @property
    def parallel(self) -> bool:
        """Several calls, every tool parallel-safe, and none denied (a turn with a denial runs
        one call after another, so each result is stored on its own in call order)."""
        tools = self.tools
        mine = [self.verdicts.get(c.id) for c in self.calls]
        if any(v is not None and not v.approved for v in mine):
            return False
        return len(self.calls) > 1 and all(t is not None and t.parallel_safe for t in tools)

    async def _execute(self, i: int) -> None:
        call = self.calls[i]

        async def report(partial: str) -> None:
            await self.updates.put((i, partial))

        try:
            verdict = self.verdicts.get(call.id)
            if verdict is not None and not verdict.approved:
                self.results[i] = denied_result(call, verdict.reason)
            else:
                tool = self.tools[i]
                self.results[i] = await _execute_one(
                    self.options, self.executor, call, tool, report
                )
        finally:
            await self.updates.put((i, None))

    def start(self, i: int) -> AgentEvent:
        self.tasks[i] = asyncio.create_task(self._execute(i))
        return tool_start(self.calls[i])

    async def drain(self, until: set[int]) -> AsyncGenerator[AgentEvent, None]:
        while until:
            i, partial = await self.updates.get()
            if partial is None:
                until.discard(i)
                self.tasks[i].result()  # re-raise an executor crash
            else:
                c = self.calls[i]
                yield AgentEvent(
                    type="tool_execution_update",
                    tool_call_id=c.id,
                    tool_name=c.name,
                    partial_result=partial,
                )

    def finish(self, i: int) -> list[AgentEvent]:
        result = self.results[i]
        return [
            tool_end(self.calls[i], result),
            AgentEvent(type="message_start", message=result),
            AgentEvent(type="message_end", message=result),
        ]


async def run_tools(
    options: AgentOptions,
    executor: ToolExecutor,
    calls: list[ToolCall],
    verdicts: Mapping[str, Verdict],
) -> AsyncGenerator[AgentEvent, None]:
    """Run a turn's calls (concurrently when every called tool allows it), results in call
    order; ``verdicts``: the decisions on the calls a person decided."""
    turn = _Turn(options, executor, calls, verdicts)
    if isinstance(executor, TurnPlanner):
        executor.plan_turn(turn.calls, turn.parallel)
    n = len(turn.calls)
    closing_now = False
    try:
        if turn.parallel:
            for i in range(n):
                yield turn.start(i)
            async with closing(turn.drain(set(range(n)))) as updates_of_all:
                async for event in updates_of_all:
                    yield event
            for i in range(n):
                for event in turn.finish(i):
                    yield event
        else:
            for i in range(n):
                yield turn.start(i)
                async with closing(turn.drain({i})) as updates_of_one:
                    async for event in updates_of_one:
                        yield event
                for event in turn.finish(i):
                    yield event
    except GeneratorExit:
        # Closed (aclose, or finalized with its workflow on eviction): a generator being
        # closed must not await, so the tool tasks are cancelled and left to finish.
        closing_now = True
        raise
    finally:
        pending = [t for t in turn.tasks.values() if not t.done()]
        for task in pending:
            task.cancel()
            task.add_done_callback(_retrieve)
        if pending and not closing_now:
            await asyncio.gather(*pending, return_exceptions=True)


def _retrieve(task: asyncio.Task[None]) -> None:
    """Consume a cancelled tool task's outcome, so nothing is reported as never retrieved."""
    if not task.cancelled():
        task.exception()


class closing(Generic[T]):
    """``contextlib.aclosing`` that also works while the whole chain is being finalized.

    A generator nested in another (``async for`` over it) is closed with its consumer, so an
    abandoned run cancels its tool tasks at once. When the garbage collector finalizes a
    suspended chain (a Temporal workflow evicted mid-run), the inner generator is still
    mid-``await`` (``ag_running``) and is finalized on its own: closing it then would raise
    "already running", so it is left alone. No generator here awaits while closing.
    """

    def __init__(self, agen: AsyncIterator[T]) -> None:
        self.agen = agen

    async def __aenter__(self) -> AsyncIterator[T]:
        return self.agen

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        agen = self.agen
        if isinstance(agen, types.AsyncGeneratorType) and not agen.ag_running:
            await agen.aclose()
