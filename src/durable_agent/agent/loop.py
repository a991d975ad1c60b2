"""The inner agent loop: model call, tool calls, tool results, repeat.

The loop is a pull-based async generator: it advances only when its consumer asks for the next
event. The durable engine relies on that: it stores each ``message_end`` before the loop resumes,
so the next model call (which, under Temporal, reads the conversation back from the store) always
sees every earlier message.
"""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Generic, Protocol, TypeVar, runtime_checkable

from ..ai.messages import Message, ToolCall, Usage, with_call_ids
from ..ai.model import LanguageModel, ModelError, ModelRequest, ToolSpec
from ..ai.tools import Tool
from .events import AgentEvent
from .hooks import call_hook
from .options import AgentOptions
from .retry import RetryingModel
from .tool_exec import LocalToolExecutor, ToolExecutor

__all__ = ["AgentRun", "Factory", "Loop", "ModelFactory", "ModelLoop", "build_loop", "model"]


T = TypeVar("T")


class _closing(Generic[T]):
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


class AgentRun:
    """One run of a loop: its events (once) and the messages it produced.

    ``stored_forms`` is how a consumer that stored a tool result in another form (the engine's
    stand-in for a result the store refused as too large, docs/design.md#repair-and-reconcile)
    tells the loop: the loop goes on with the stored form in its context, so the model sees what
    the store holds. A loop that ignores it (a custom one) keeps its own form; the store is still
    right."""

    def __init__(
        self,
        events: AsyncGenerator[AgentEvent, None],
        *,
        stored_forms: dict[str, Message] | None = None,
    ) -> None:
        self._gen = events
        self._started = False
        self._messages: list[Message] = []
        self.stored_forms: dict[str, Message] = {} if stored_forms is None else stored_forms
        """Tool call ID -> the stored form of its result, when it differs from the yielded one."""

    def stored_as(self, stored: Message) -> None:
        """Record that the tool result just yielded was stored as ``stored`` (same call ID);
        call it before asking for the next event."""
        if stored.role == "tool_result" and stored.tool_call_id:
            self.stored_forms[stored.tool_call_id] = stored

    def events(self) -> AsyncIterator[AgentEvent]:
        """The run's events, in order. May be called once."""
        if self._started:
            raise RuntimeError("events() may be called only once per run")
        self._started = True
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[AgentEvent, None]:
        async with _closing(self._gen) as events:
            async for event in events:
                yield event
                if event.type == "message_end" and event.message is not None:
                    self._messages.append(self._stored_form(event.message))

    def _stored_form(self, message: Message) -> Message:
        if message.role == "tool_result" and message.tool_call_id:
            return self.stored_forms.get(message.tool_call_id, message)
        return message

    async def wait(self) -> list[Message]:
        """Run to the end (if nobody is reading events) and return the produced messages."""
        if not self._started:
            async for _ in self.events():
                pass
        return list(self._messages)

    async def aclose(self) -> None:
        await self._gen.aclose()


@runtime_checkable
class Loop(Protocol):
    """What a factory builds: something that runs input messages and can be closed."""

    def run(self, messages: Sequence[Message]) -> AgentRun: ...

    async def aclose(self) -> None: ...


Factory = Callable[[AgentOptions], "Loop | Awaitable[Loop]"]
"""Builds one loop per run (and per compaction) from the agent's options plus ``history``."""


class ModelLoop:
    """The default loop around a :class:`LanguageModel`.

    ``tool_executor`` runs tool calls (in this process by default; the Temporal executor passes one
    that schedules activities). Model retries are the model's business: in-process the model is
    wrapped in :class:`RetryingModel` by :func:`model`.
    """

    def __init__(
        self,
        lm: LanguageModel,
        options: AgentOptions,
        *,
        tool_executor: ToolExecutor | None = None,
    ) -> None:
        self.lm = lm
        self.options = options
        self.tool_executor = tool_executor or LocalToolExecutor()
        self._runs: list[AgentRun] = []
        self._tool_specs: list[ToolSpec] | None = None
        """The tools' specs, built once per loop (a JSON schema per tool is not free)."""

    def run(self, messages: Sequence[Message]) -> AgentRun:
        forms: dict[str, Message] = {}
        run = AgentRun(self._events(list(messages), forms), stored_forms=forms)
        self._runs.append(run)
        return run

    async def aclose(self) -> None:
        for run in self._runs:
            await run.aclose()
        self._runs.clear()

    def _specs(self) -> list[ToolSpec]:
        if self._tool_specs is None:
            self._tool_specs = [t.spec for t in self.options.tools]
        return self._tool_specs

    def _request(self, context: list[Message]) -> ModelRequest:
        return ModelRequest(
            system_prompt=self.options.system_prompt,
            messages=list(context),
            tools=list(self._specs()),
            options=dict(self.options.model_options),
        )

    async def _call_model(
        self, context: list[Message]
    ) -> AsyncGenerator[AgentEvent | Message, None]:
        """Yield message_start/update events, then the complete message (not an event)."""
        hooks = self.options.hooks
        request = self._request(context)
        if hooks is not None:
            request = await call_hook(hooks.before_model, request) or request
        final: Message | None = None
        shown = ""  # the text of the reply's last update: each update's delta is what it adds
        async for ev in self.lm.stream(request):
            if ev.type == "start":
                shown = ""  # a retry starts a new message (and a new message_start)
                yield AgentEvent(type="message_start", message=ev.partial)
            elif ev.type == "done":
                final = ev.message
            else:
                text = ev.partial.text()
                delta = text[len(shown) :] if text.startswith(shown) else text
                shown = text
                yield AgentEvent(type="message_update", message=ev.partial, delta=delta)
        if final is None:
            raise ModelError("model stream ended without a complete message", retryable=True)
        if hooks is not None:
            final = await call_hook(hooks.after_model, final) or final
        yield with_call_ids(final)  # a call without an ID could not be answered durably

    async def _events(
        self, input_messages: list[Message], stored_forms: dict[str, Message]
    ) -> AsyncGenerator[AgentEvent, None]:
        opts = self.options
        context = [*opts.history, *input_messages]
        produced: list[Message] = []
        usage = Usage()
        turns = 0
        injected: list[Message] | None = None
        yield AgentEvent(type="agent_start")
        while True:
            turns += 1
            yield AgentEvent(type="turn_start", input=injected)
            for message in injected or ():
                yield AgentEvent(type="message_start", message=message)
                yield AgentEvent(type="message_end", message=message)
            injected = None
            assistant: Message | None = None
            async with _closing(self._call_model(context)) as stream:
                async for item in stream:
                    if isinstance(item, Message):
                        assistant = item
                    else:
                        yield item
            assert assistant is not None
            yield AgentEvent(type="message_end", message=assistant)
            context.append(assistant)
            produced.append(assistant)
            if assistant.usage is not None:
                usage = usage + assistant.usage
            calls = [c for c in assistant.tool_calls() if not c.server]
            if assistant.stop_reason == "aborted":
                calls = []  # a cancelled reply's calls are answered by the canceller, not run
            if calls:
                async with _closing(self._run_tools(calls)) as tool_events:
                    async for event in tool_events:
                        yield event
                        if event.type == "message_end" and event.message is not None:
                            # the consumer has stored it by now: go on with what it stored
                            result = stored_forms.pop(event.message.tool_call_id or "", None)
                            context.append(result or event.message)
                            produced.append(result or event.message)
            yield AgentEvent(type="turn_end", message=assistant)
            may_continue = opts.max_turns is None or turns < opts.max_turns
            if calls and may_continue and assistant.stop_reason not in ("error", "aborted"):
                continue
            stopped = assistant.stop_reason in ("error", "aborted")
            if not calls and may_continue and not stopped and opts.hooks is not None:
                follow = await call_hook(opts.hooks.follow_up, list(produced))
                if follow:
                    injected = list(follow)
                    context.extend(injected)
                    produced.extend(injected)
                    continue
            break
        yield AgentEvent(type="agent_end", messages=produced, usage=usage)

    async def _run_tools(self, calls: list[ToolCall]) -> AsyncGenerator[AgentEvent, None]:
        """Run a turn's calls (concurrently when every called tool allows it), results in call
        order."""
        opts = self.options
        tools = [opts.tool(c.name) for c in calls]
        parallel = len(calls) > 1 and all(t is not None and t.parallel_safe for t in tools)
        updates: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
        results: dict[int, Message] = {}
        tasks: dict[int, asyncio.Task[None]] = {}

        async def execute(i: int, call: ToolCall) -> None:
            async def report(partial: str) -> None:
                await updates.put((i, partial))

            try:
                results[i] = await self._execute_one(call, tools[i], report)
            finally:
                await updates.put((i, None))

        def start(i: int) -> AgentEvent:
            tasks[i] = asyncio.create_task(execute(i, calls[i]))
            c = calls[i]
            return AgentEvent(
                type="tool_execution_start", tool_call_id=c.id, tool_name=c.name, args=c.arguments
            )

        async def drain(until: set[int]) -> AsyncGenerator[AgentEvent, None]:
            while until:
                i, partial = await updates.get()
                if partial is None:
                    until.discard(i)
                    tasks[i].result()  # re-raise an executor crash
                else:
                    c = calls[i]
                    yield AgentEvent(
                        type="tool_execution_update",
                        tool_call_id=c.id,
                        tool_name=c.name,
                        partial_result=partial,
                    )

        def finish(i: int) -> list[AgentEvent]:
            result, c = results[i], calls[i]
            return [
                AgentEvent(
                    type="tool_execution_end",
                    tool_call_id=c.id,
                    tool_name=c.name,
                    result=result,
                    is_error=result.is_error,
                ),
                AgentEvent(type="message_start", message=result),
                AgentEvent(type="message_end", message=result),
            ]

        closing = False
        try:
            if parallel:
                for i in range(len(calls)):
                    yield start(i)
                async with _closing(drain(set(range(len(calls))))) as updates_of_all:
                    async for event in updates_of_all:
                        yield event
                for i in range(len(calls)):
                    for event in finish(i):
                        yield event
            else:
                for i in range(len(calls)):
                    yield start(i)
                    async with _closing(drain({i})) as updates_of_one:
                        async for event in updates_of_one:
                            yield event
                    for event in finish(i):
                        yield event
        except GeneratorExit:
            # Closed (aclose, or finalized with its workflow on eviction): a generator being
            # closed must not await, so the tool tasks are cancelled and left to finish.
            closing = True
            raise
        finally:
            pending = [t for t in tasks.values() if not t.done()]
            for task in pending:
                task.cancel()
                task.add_done_callback(_retrieve)
            if pending and not closing:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _execute_one(
        self,
        call: ToolCall,
        tool: Tool | None,
        report: Callable[[str], Awaitable[None]],
    ) -> Message:
        hooks = self.options.hooks
        if hooks is not None:
            replaced = await call_hook(hooks.before_tool, call)
            if isinstance(replaced, Message):
                return replaced
            if isinstance(replaced, ToolCall):
                call = replaced
        result = await self.tool_executor.execute(tool, call, report)
        if hooks is not None:
            result = await call_hook(hooks.after_tool, call, result) or result
        return result


def _retrieve(task: asyncio.Task[None]) -> None:
    """Consume a cancelled tool task's outcome, so nothing is reported as never retrieved."""
    if not task.cancelled():
        task.exception()


class ModelFactory:
    """The default-loop factory: a :class:`ModelLoop` on ``lm`` with in-process model retries.

    The Temporal worker reads ``lm`` to run the same loop with model and tool calls as activities.
    """

    def __init__(self, lm: LanguageModel) -> None:
        self.lm = lm

    def __call__(self, options: AgentOptions) -> Loop:
        return ModelLoop(RetryingModel(self.lm, options.model_retry), options)


def model(lm: LanguageModel) -> ModelFactory:
    """The default-loop factory for ``lm``."""
    return ModelFactory(lm)


async def build_loop(factory: Factory, options: AgentOptions) -> Loop:
    """Call a plain or coroutine factory."""
    loop = factory(options)
    if inspect.isawaitable(loop):
        loop = await loop
    return loop
