"""The inner agent loop: model call, tool calls, tool results, repeat.

The loop is a pull-based async generator: it advances only when its consumer asks for the next
event. The durable engine relies on that: it stores each ``message_end`` before the loop resumes,
so the next model call (which, under Temporal, reads the conversation back from the store) always
sees every earlier message.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from ..ai.messages import Message, ToolCall, Usage, with_call_ids
from ..ai.model import LanguageModel, ModelError, ModelEvent, ModelRequest, ToolSpec
from ..ai.tools import RetryPolicy
from .approval import Resume, Verdict
from .events import AgentEvent
from .hooks import call_hook
from .options import AgentOptions
from .tool_exec import LocalToolExecutor, ToolExecutor
from .tool_run import closing, run_tools

__all__ = [
    "AgentRun",
    "Factory",
    "Inbox",
    "Loop",
    "ModelFactory",
    "ModelLoop",
    "RetryingModel",
    "build_loop",
    "model",
]


class Inbox(Protocol):
    """Called after each ``turn_end`` with whether the loop would go on: the messages people
    sent into the run that are due now (the consumer stored them), which the loop adds to its
    context before its next model call (docs/design.md#approvals-and-steering). ``last``: where
    the loop would stop, finding none ends the run (the consumer then takes no more); not the
    last look when a ``follow_up`` hook is asked next, which may go on."""

    def __call__(self, would_continue: bool, last: bool = True) -> Awaitable[list[Message]]: ...


class AgentRun:
    """One run of a loop: its events (once) and the messages it produced.

    ``stored_forms`` is how a consumer that stored a tool result in another form (the engine's
    stand-in for a result the store refused as too large, docs/design.md#repair-and-reconcile)
    tells the loop: the loop goes on with the stored form in its context, so the model sees what
    the store holds. A loop that ignores it (a custom one) keeps its own form; the store is still
    right.

    ``verdicts`` and ``inbox`` are how a consumer that waits for people steers the run: it fills
    ``verdicts`` (call ID -> a person's decision) before asking for the event after an assistant
    ``message_end``, and sets ``inbox`` before the first event."""

    def __init__(
        self,
        events: AsyncGenerator[AgentEvent, None]
        | Callable[[AgentRun], AsyncGenerator[AgentEvent, None]],
    ) -> None:
        """``events``: the run's generator, or a function of this run that makes it (a loop
        that reads ``stored_forms``, ``verdicts`` and ``inbox`` as it goes)."""
        self._started = False
        self._messages: list[Message] = []
        self.stored_forms: dict[str, Message] = {}
        """Tool call ID -> the stored form of its result, when it differs from the yielded one."""
        self.verdicts: dict[str, Verdict] = {}
        self.inbox: Inbox | None = None
        self._gen = events if isinstance(events, AsyncGenerator) else events(self)

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
        async with closing(self._gen) as events:
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

    def run(self, messages: Sequence[Message], *, resume: Resume | None = None) -> AgentRun:
        """``resume``: start from a stored assistant message whose calls are decided, instead
        of a model call (a run that waited for people, docs/design.md#approvals-and-steering)."""
        ...

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

    def run(self, messages: Sequence[Message], *, resume: Resume | None = None) -> AgentRun:
        run = AgentRun(lambda r: self._events(list(messages), r, resume))
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

    async def _model_turn(
        self, context: list[Message], injected: list[Message] | None
    ) -> AsyncGenerator[AgentEvent | Message, None]:
        """A turn's start (with the messages a hook injected) and its model call: events, then
        the reply's ``message_end``, then the reply itself (not an event)."""
        yield AgentEvent(type="turn_start", input=injected)
        for message in injected or ():
            yield AgentEvent(type="message_start", message=message)
            yield AgentEvent(type="message_end", message=message)
        reply: Message | None = None
        async with closing(self._call_model(context)) as stream:
            async for item in stream:
                if isinstance(item, Message):
                    reply = item
                else:
                    yield item
        assert reply is not None
        yield AgentEvent(type="message_end", message=reply)
        yield reply

    async def _tools(
        self, calls: list[ToolCall], run: AgentRun, context: list[Message], produced: list[Message]
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run a turn's calls; each result joins ``context`` and ``produced`` as stored."""
        tools = run_tools(self.options, self.tool_executor, calls, run.verdicts)
        async with closing(tools) as tool_events:
            async for event in tool_events:
                yield event
                if event.type == "message_end" and event.message is not None:
                    # the consumer has stored it by now: go on with what it stored
                    key = event.message.tool_call_id or ""
                    result = run.stored_forms.pop(key, None) or event.message
                    context.append(result)
                    produced.append(result)

    async def _events(
        self, input_messages: list[Message], run: AgentRun, resume: Resume | None
    ) -> AsyncGenerator[AgentEvent, None]:
        opts = self.options
        context = [*opts.history, *input_messages]
        produced: list[Message] = []
        usage = Usage()
        turns = 0
        injected: list[Message] | None = None
        yield AgentEvent(type="agent_start")
        while True:
            if resume is not None:
                # the turn's reply is stored and its calls decided: no model call
                assistant, answered = resume.assistant, resume.results
                context += [assistant, *answered]
                done = {r.tool_call_id for r in answered}
                calls = [c for c in _calls(assistant) if c.id not in done]
                resume = None
            else:
                turns += 1
                reply: Message | None = None
                async with closing(self._model_turn(context, injected)) as stream:
                    async for item in stream:
                        if isinstance(item, Message):
                            reply = item
                        else:
                            yield item
                assert reply is not None
                assistant, injected = reply, None
                context.append(assistant)
                produced.append(assistant)
                if assistant.usage is not None:
                    usage = usage + assistant.usage
                calls = _calls(assistant)
            if calls:
                async with closing(self._tools(calls, run, context, produced)) as tool_events:
                    async for event in tool_events:
                        yield event
            yield AgentEvent(type="turn_end", message=assistant)
            stopped = assistant.stop_reason in ("error", "aborted")
            may_continue = opts.max_turns is None or turns < opts.max_turns
            going_on = bool(calls) and may_continue and not stopped
            asks = not calls and may_continue and not stopped  # the follow_up hook, if any
            delivered, follow = await self._next_input(run, going_on, asks, produced)
            if follow:
                injected = follow
                context.extend(injected)
                produced.extend(injected)
            context.extend(delivered)  # a delivered message always gets a model call
            if not (going_on or delivered or follow):
                break
        yield AgentEvent(type="agent_end", messages=produced, usage=usage)

    async def _next_input(
        self, run: AgentRun, going_on: bool, asks: bool, produced: list[Message]
    ) -> tuple[list[Message], list[Message]]:
        """What people sent that is due, else (where the loop would stop, ``asks``) the
        ``follow_up`` hook's messages; neither where it would stop: the run ends. The inbox's
        last look comes after the hook, so a run the hook goes on with takes messages still."""
        hook = None if self.options.hooks is None else self.options.hooks.follow_up
        hooked = asks and hook is not None
        delivered = [] if run.inbox is None else await run.inbox(going_on, not hooked)
        if delivered or not hooked:
            return delivered, []
        follow = await call_hook(hook, list(produced))
        if follow:
            return [], list(follow)
        return ([] if run.inbox is None else await run.inbox(False)), []


def _calls(assistant: Message) -> list[ToolCall]:
    """The calls the loop runs: a cancelled reply's are answered by the canceller instead."""
    if assistant.stop_reason == "aborted":
        return []
    return [c for c in assistant.tool_calls() if not c.server]


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


class RetryingModel:
    """Retries retryable :class:`ModelError`s of ``model`` per ``policy``: in process only, so
    the loop itself never retries (under Temporal the activity retry policy does this job).

    Each retry starts a fresh stream (a new ``start`` event, hence a new ``message_start``), which
    is why consumers reset their display on ``message_start``.
    """

    def __init__(self, model: LanguageModel, policy: RetryPolicy) -> None:
        self.model = model
        self.policy = policy

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        attempt = 1
        while True:
            try:
                async for event in self.model.stream(request):
                    yield event
                return
            except ModelError as exc:
                if not exc.retryable or attempt >= self.policy.max_attempts:
                    raise
                delay = max(self.policy.delay(attempt), exc.retry_after or 0.0)
                await asyncio.sleep(min(delay, self.policy.max_interval))
                attempt += 1
