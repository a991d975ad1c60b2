"""The inner loop (``durable_agent.agent``): event order, tools, hooks, retries, ``model(lm)``.

These drive :class:`ModelLoop` directly with a :class:`ScriptedModel`; nothing is stored here (the
durable layer is tested in ``test_durable_*``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_agent.agent import (
    AgentEvent,
    AgentOptions,
    AgentRun,
    Hooks,
    LocalToolExecutor,
    ModelLoop,
    RetryingModel,
    build_loop,
    failure_text,
    model,
)
from durable_agent.ai import (
    Message,
    ModelError,
    ModelRequest,
    Reply,
    RetryPolicy,
    ScriptedModel,
    TextContent,
    ToolCall,
    ToolContext,
    Usage,
    tool,
    tool_result_message,
    user_message,
)
from tests.durable_runs.support import ONE_TOOL_TURN

FAST = RetryPolicy(max_attempts=3, initial_interval=0)


def types(events: list[AgentEvent]) -> list[str]:
    return [e.type for e in events]


def without_updates(events: list[AgentEvent]) -> list[str]:
    return [t for t in types(events) if t not in ("message_update", "tool_execution_update")]


def loop_for(script: Any, **options: Any) -> tuple[ScriptedModel, ModelLoop]:
    lm = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    options.setdefault("model_retry", FAST)
    loop = model(lm)(AgentOptions(**options))
    assert isinstance(loop, ModelLoop)
    return lm, loop


async def collect(run: AgentRun) -> list[AgentEvent]:
    return [e async for e in run.events()]


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


# -- event order ------------------------------------------------------------------------------


async def test_text_turn_event_order_and_agent_end() -> None:
    _, loop = loop_for([Reply(text="hello there, friend", chunk_size=4)])
    events = await collect(loop.run([user_message("hi")]))
    t = types(events)
    assert t[:3] == ["agent_start", "turn_start", "message_start"]
    assert t[-3:] == ["message_end", "turn_end", "agent_end"]
    updates = [e for e in events if e.type == "message_update"]
    assert len(updates) == 5  # 19 characters in chunks of 4
    assert [u.message.text() for u in updates if u.message] == [
        "hell",
        "hello th",
        "hello there,",
        "hello there, fri",
        "hello there, friend",
    ]
    end = events[-1]
    assert end.messages is not None and [m.text() for m in end.messages] == ["hello there, friend"]
    final = next(e for e in events if e.type == "message_end")
    assert final.message is not None and final.message.stop_reason == "stop"
    assert end.usage == final.message.usage
    # the input is not echoed as an event
    assert all(e.message is None or e.message.role == "assistant" for e in events)


async def test_one_tool_turn_exact_sequence() -> None:
    lm, loop = loop_for(
        [Reply.call("echo", {"text": "x"}, id="c1"), Reply(text="done")], tools=(echo,)
    )
    events = await collect(loop.run([user_message("go")]))
    assert without_updates(events) == ONE_TOOL_TURN
    start = next(e for e in events if e.type == "tool_execution_start")
    assert (start.tool_call_id, start.tool_name, start.args) == ("c1", "echo", {"text": "x"})
    end = next(e for e in events if e.type == "tool_execution_end")
    assert end.result is not None and end.result.text() == "echo: x"
    assert end.is_error is False
    ends = [e.message for e in events if e.type == "message_end"]
    assert [m.role for m in ends if m] == ["assistant", "tool_result", "assistant"]
    assert ends[1] is end.result
    agent_end = events[-1]
    assert agent_end.messages == ends
    # the second request carries the first turn and the result
    assert [m.role for m in lm.requests[1].messages] == ["user", "assistant", "tool_result"]


async def test_usage_sums_over_turns() -> None:
    _, loop = loop_for(
        [
            Reply.call("echo", {"text": "x"}, id="c1").model_copy(
                update={"usage": Usage(input=10, output=2)}
            ),
            Reply(text="done", usage=Usage(input=20, output=3)),
        ],
        tools=(echo,),
    )
    events = await collect(loop.run([user_message("go")]))
    assert events[-1].usage is not None
    assert (events[-1].usage.input, events[-1].usage.output) == (30, 5)


async def test_request_carries_history_system_prompt_tools_and_options() -> None:
    history = [user_message("earlier"), Message(role="assistant", content=[TextContent(text="a")])]
    lm, loop = loop_for(
        ["ok"],
        system_prompt="be brief",
        tools=(echo,),
        model_options={"temperature": 0},
        history=history,
    )
    await loop.run([user_message("now")]).wait()
    request = lm.requests[0]
    assert request.system_prompt == "be brief"
    assert [m.text() for m in request.messages] == ["earlier", "a", "now"]
    assert [t.name for t in request.tools] == ["echo"]
    assert request.options == {"temperature": 0}


async def test_no_input_continues_from_history() -> None:
    lm, loop = loop_for(["again"], history=[user_message("q")])
    messages = await loop.run([]).wait()
    assert [m.text() for m in messages] == ["again"]
    assert [m.text() for m in lm.requests[0].messages] == ["q"]


async def test_server_tool_calls_are_not_executed() -> None:
    server_call = ToolCall(id="s1", name="web_search", server=True)
    lm, loop = loop_for([Reply(text="found it", tool_calls=[server_call])])
    events = await collect(loop.run([user_message("search")]))
    assert "tool_execution_start" not in types(events)
    assert len(lm.requests) == 1


# -- AgentRun ---------------------------------------------------------------------------------


async def test_events_may_be_called_once() -> None:
    _, loop = loop_for(["ok"])
    run = loop.run([user_message("hi")])
    await collect(run)
    with pytest.raises(RuntimeError):
        run.events()
    # wait() after the events were consumed returns the produced messages
    assert [m.text() for m in await run.wait()] == ["ok"]


async def test_wait_without_reading_events() -> None:
    _, loop = loop_for([Reply.call("echo", {"text": "y"}, id="c1"), "fin"], tools=(echo,))
    messages = await loop.run([user_message("hi")]).wait()
    assert [m.role for m in messages] == ["assistant", "tool_result", "assistant"]


async def test_aclose_closes_an_unfinished_run() -> None:
    _, loop = loop_for(["one two three four", "unused"])
    run = loop.run([user_message("hi")])
    agen = run.events()
    first = await agen.__anext__()
    assert first.type == "agent_start"
    await loop.aclose()
    with pytest.raises(StopAsyncIteration):
        await agen.__anext__()


async def test_build_loop_accepts_plain_and_coroutine_factories() -> None:
    lm = ScriptedModel(["a", "b"])

    async def async_factory(options: AgentOptions) -> ModelLoop:
        return ModelLoop(lm, options)

    plain = await build_loop(model(lm), AgentOptions())
    coro = await build_loop(async_factory, AgentOptions())
    assert isinstance(plain, ModelLoop) and isinstance(coro, ModelLoop)
    assert isinstance(plain.lm, RetryingModel)  # model(lm) retries in-process
    assert plain.lm.model is lm


def test_agent_options_refuse_unknown_fields() -> None:
    with pytest.raises(ValueError):
        AgentOptions(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        AgentOptions(max_turns=0)


# -- tools ------------------------------------------------------------------------------------


async def test_parallel_tools_overlap_and_results_keep_call_order() -> None:
    a_started = asyncio.Event()
    b_done = asyncio.Event()
    finished: list[str] = []

    @tool
    async def slow(name: str) -> str:
        """a can only finish after b did, and b only starts working once a is running: the
        calls must overlap (run sequentially, this would deadlock)."""
        if name == "a":
            a_started.set()
            await b_done.wait()
        else:
            await a_started.wait()
            b_done.set()
        finished.append(name)
        return f"result {name}"

    _, loop = loop_for(
        [
            Reply(
                tool_calls=[
                    ToolCall(id="ca", name="slow", arguments={"name": "a"}),
                    ToolCall(id="cb", name="slow", arguments={"name": "b"}),
                ]
            ),
            "both done",
        ],
        tools=(slow,),
    )
    events = await asyncio.wait_for(collect(loop.run([user_message("go")])), 10)
    assert finished == ["b", "a"]  # b completed first ...
    assert without_updates(events)[4:12] == [
        "tool_execution_start",
        "tool_execution_start",
        "tool_execution_end",
        "message_start",
        "message_end",
        "tool_execution_end",
        "message_start",
        "message_end",
    ]
    ends = [e for e in events if e.type == "tool_execution_end"]
    assert [e.tool_call_id for e in ends] == ["ca", "cb"]  # ... but results are in call order
    results = [e.message for e in events if e.type == "message_end"][1:3]
    assert [m.tool_call_id for m in results if m] == ["ca", "cb"]


async def test_one_parallel_unsafe_tool_forces_sequential_execution() -> None:
    log: list[str] = []
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(parallel_safe=False)
    async def exclusive() -> str:
        log.append("exclusive start")
        started.set()
        await release.wait()  # held until the test saw that nothing else started meanwhile
        log.append("exclusive end")
        return "x"

    @tool
    async def normal() -> str:
        log.append("normal start")
        return "n"

    _, loop = loop_for(
        [
            Reply(
                tool_calls=[
                    ToolCall(id="c1", name="exclusive"),
                    ToolCall(id="c2", name="normal"),
                ]
            ),
            "ok",
        ],
        tools=(exclusive, normal),
    )
    running = asyncio.ensure_future(collect(loop.run([user_message("go")])))
    await started.wait()
    # Concurrent calls are all started before the loop first waits (their tasks are created
    # with their start events), so a concurrently started ``normal`` would have run before
    # ``exclusive`` let this test resume: it did not, and the loop is waiting for exclusive.
    assert log == ["exclusive start"]
    assert not running.done()
    release.set()
    events = await asyncio.wait_for(running, 10)
    assert log == ["exclusive start", "exclusive end", "normal start"]
    tool_events = [(e.type, e.tool_call_id) for e in events if e.type.startswith("tool_execution")]
    assert tool_events == [
        ("tool_execution_start", "c1"),
        ("tool_execution_end", "c1"),
        ("tool_execution_start", "c2"),
        ("tool_execution_end", "c2"),
    ]


async def test_tool_progress_reports_become_update_events() -> None:
    @tool
    async def progress(ctx: ToolContext) -> str:
        await ctx.report("25%")
        await ctx.report("75%")
        return "100%"

    _, loop = loop_for([Reply.call("progress", id="p1"), "ok"], tools=(progress,))
    events = await collect(loop.run([user_message("go")]))
    tool_part = [e for e in events if e.type.startswith("tool_execution")]
    assert [(e.type, e.partial_result) for e in tool_part] == [
        ("tool_execution_start", None),
        ("tool_execution_update", "25%"),
        ("tool_execution_update", "75%"),
        ("tool_execution_end", None),
    ]
    assert all(e.tool_call_id == "p1" and e.tool_name == "progress" for e in tool_part)


async def test_tool_error_after_retries_becomes_failure_result() -> None:
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("disk on fire")

    _, loop = loop_for([Reply.call("flaky", id="f1"), "sorry"], tools=(flaky,))
    events = await collect(loop.run([user_message("go")]))
    end = next(e for e in events if e.type == "tool_execution_end")
    assert attempts == 3
    assert end.is_error is True
    assert end.result is not None
    assert end.result.is_error is True
    assert end.result.text() == "tool execution failed: RuntimeError: disk on fire"
    assert end.result.tool_call_id == "f1" and end.result.tool_name == "flaky"


async def test_retryable_tool_error_then_success() -> None:
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=3, initial_interval=0))
    async def second_time() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("reset")
        return "fine"

    _, loop = loop_for([Reply.call("second_time", id="s1"), "ok"], tools=(second_time,))
    messages = await loop.run([user_message("go")]).wait()
    assert attempts == 2
    assert messages[1].text() == "fine" and messages[1].is_error is False


async def test_non_retryable_tool_error_fails_at_once() -> None:
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=5, initial_interval=0))
    async def picky() -> str:
        nonlocal attempts
        attempts += 1
        raise ValueError("bad input")

    _, loop = loop_for([Reply.call("picky", id="p1"), "ok"], tools=(picky,))
    messages = await loop.run([user_message("go")]).wait()
    assert attempts == 1
    assert messages[1].text() == "tool execution failed: ValueError: bad input"


async def test_tool_timeout_is_a_failure_result() -> None:
    @tool(timeout=0.01, retry=RetryPolicy(max_attempts=1))
    async def hangs() -> str:
        await asyncio.Event().wait()
        return "never"

    _, loop = loop_for([Reply.call("hangs", id="h1"), "ok"], tools=(hangs,))
    messages = await loop.run([user_message("go")]).wait()
    assert messages[1].is_error
    assert messages[1].text().startswith("tool execution failed: TimeoutError")


async def test_invalid_arguments_are_a_failure_result() -> None:
    _, loop = loop_for([Reply.call("echo", {"wrong": 1}, id="e1"), "ok"], tools=(echo,))
    messages = await loop.run([user_message("go")]).wait()
    assert messages[1].is_error
    assert messages[1].text().startswith("tool execution failed: ValidationError:")


async def test_unknown_tool_is_a_failure_result() -> None:
    _, loop = loop_for([Reply.call("nope", id="n1"), "ok"])
    messages = await loop.run([user_message("go")]).wait()
    assert messages[1].is_error and messages[1].tool_call_id == "n1"
    assert messages[1].text().startswith("tool execution failed: LookupError:")


def test_failure_text_format() -> None:
    assert failure_text(KeyError("k")) == "tool execution failed: KeyError: 'k'"
    assert failure_text(RuntimeError("x")) == "tool execution failed: RuntimeError: x"


async def test_local_tool_executor_propagates_cancellation() -> None:
    started = asyncio.Event()

    @tool
    async def blocked() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    call = ToolCall(id="b1", name="blocked")

    async def report(_: str) -> None:
        return None

    task = asyncio.create_task(LocalToolExecutor().execute(blocked, call, report))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_max_turns_stops_after_tools() -> None:
    lm, loop = loop_for(
        [Reply.call("echo", {"text": "x"}, id="c1"), "unused"], tools=(echo,), max_turns=1
    )
    events = await collect(loop.run([user_message("go")]))
    assert len(lm.requests) == 1
    assert types(events)[-2:] == ["turn_end", "agent_end"]
    assert [m.role for m in events[-1].messages or []] == ["assistant", "tool_result"]


async def test_max_turns_none_means_no_limit() -> None:
    script: list[Reply | str] = [
        Reply.call("echo", {"text": str(i)}, id=f"c{i}") for i in range(60)
    ]
    script.append("done")
    lm, loop = loop_for(script, tools=(echo,), max_turns=None)
    await loop.run([user_message("go")]).wait()
    assert len(lm.requests) == 61


async def test_default_max_turns_is_fifty() -> None:
    script = [Reply.call("echo", {"text": str(i)}, id=f"c{i}") for i in range(60)]
    lm, loop = loop_for(script, tools=(echo,))
    await loop.run([user_message("go")]).wait()
    assert len(lm.requests) == 50


# -- model retries ----------------------------------------------------------------------------


async def test_retryable_model_error_is_retried_with_new_message_start() -> None:
    lm, loop = loop_for(
        [
            Reply(text="partial te", error=ModelError("overloaded", retryable=True)),
            Reply(error=ModelError("503", retryable=True)),
            Reply(text="good"),
        ]
    )
    events = await collect(loop.run([user_message("hi")]))
    assert len(lm.requests) == 3
    assert types(events).count("message_start") == 2  # the second failure never started
    assert types(events).count("message_end") == 1
    ends = [e.message for e in events if e.type == "message_end"]
    assert ends[0] is not None and ends[0].text() == "good"


async def test_non_retryable_model_error_propagates() -> None:
    error = ModelError("bad request", retryable=False)
    lm, loop = loop_for([Reply(error=error), "unused"])
    run = loop.run([user_message("hi")])
    seen: list[str] = []
    with pytest.raises(ModelError) as info:
        async for event in run.events():
            seen.append(event.type)
    assert info.value is error
    assert "agent_end" not in seen and "message_end" not in seen
    assert len(lm.requests) == 1


async def test_model_retries_are_bounded_by_policy() -> None:
    errors = [Reply(error=ModelError(f"e{i}", retryable=True)) for i in range(5)]
    lm = ScriptedModel(errors)
    loop = model(lm)(AgentOptions(model_retry=RetryPolicy(max_attempts=2, initial_interval=0)))
    with pytest.raises(ModelError, match="e1"):
        await loop.run([user_message("hi")]).wait()
    assert len(lm.requests) == 2


async def test_retrying_model_honours_retry_after_within_max_interval() -> None:
    lm = ScriptedModel(
        [Reply(error=ModelError("slow down", retryable=True, retry_after=3600)), Reply(text="ok")]
    )
    wrapped = RetryingModel(lm, RetryPolicy(initial_interval=0, max_interval=0))
    kinds = [e.type async for e in wrapped.stream(ModelRequest())]
    assert kinds[0] == "start" and kinds[-1] == "done"


async def test_stream_without_done_is_a_model_error() -> None:
    class NoDone:
        async def stream(self, request: ModelRequest) -> Any:
            lm = ScriptedModel(["x"])
            async for event in lm.stream(request):
                if event.type != "done":
                    yield event

    loop = ModelLoop(NoDone(), AgentOptions())
    with pytest.raises(ModelError, match="without a complete message"):
        await loop.run([user_message("hi")]).wait()


# -- hooks ------------------------------------------------------------------------------------


async def test_before_and_after_model_hooks() -> None:
    def before(request: ModelRequest) -> ModelRequest:
        return request.model_copy(update={"system_prompt": "patched"})

    async def after(message: Message) -> Message:
        return message.model_copy(update={"content": [TextContent(text="rewritten")]})

    lm, loop = loop_for(["original"], hooks=Hooks(before_model=before, after_model=after))
    events = await collect(loop.run([user_message("hi")]))
    assert lm.requests[0].system_prompt == "patched"
    end = next(e for e in events if e.type == "message_end")
    assert end.message is not None and end.message.text() == "rewritten"


async def test_hooks_returning_none_change_nothing() -> None:
    hooks = Hooks(
        before_model=lambda r: None,
        after_model=lambda m: None,
        before_tool=lambda c: None,
        after_tool=lambda c, r: None,
        follow_up=lambda ms: None,
    )
    _, loop = loop_for(
        [Reply.call("echo", {"text": "z"}, id="c1"), "end"], tools=(echo,), hooks=hooks
    )
    messages = await loop.run([user_message("go")]).wait()
    assert [m.text() for m in messages] == ["", "echo: z", "end"]


async def test_before_tool_can_answer_without_running() -> None:
    ran: list[str] = []

    @tool
    async def guarded() -> str:
        ran.append("ran")
        return "secret"

    def deny(call: ToolCall) -> Message:
        return tool_result_message(call.id, call.name, TextContent(text="permission denied"))

    _, loop = loop_for(
        [Reply.call("guarded", id="g1"), "ok"], tools=(guarded,), hooks=Hooks(before_tool=deny)
    )
    messages = await loop.run([user_message("go")]).wait()
    assert ran == []
    assert messages[1].text() == "permission denied"


async def test_before_tool_can_replace_the_call_and_after_tool_the_result() -> None:
    async def before(call: ToolCall) -> ToolCall:
        return call.model_copy(update={"arguments": {"text": "replaced"}})

    def after(call: ToolCall, result: Message) -> Message:
        return result.model_copy(
            update={"content": [TextContent(text=result.text() + f" ({call.arguments['text']})")]}
        )

    _, loop = loop_for(
        [Reply.call("echo", {"text": "orig"}, id="c1"), "ok"],
        tools=(echo,),
        hooks=Hooks(before_tool=before, after_tool=after),
    )
    messages = await loop.run([user_message("go")]).wait()
    assert messages[1].text() == "echo: replaced (replaced)"


async def test_follow_up_hook_starts_another_turn_with_injected_input() -> None:
    nudges = 0

    def follow_up(produced: Any) -> list[Message] | None:
        nonlocal nudges
        if nudges:
            return None
        nudges += 1
        return [user_message("are you sure?")]

    lm, loop = loop_for(["yes", "quite sure"], hooks=Hooks(follow_up=follow_up))
    events = await collect(loop.run([user_message("q")]))
    assert without_updates(events) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "turn_end",
        "turn_start",
        "message_start",
        "message_end",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    second_turn = [e for e in events if e.type == "turn_start"][1]
    assert second_turn.input is not None
    assert [m.text() for m in second_turn.input] == ["are you sure?"]
    assert [m.text() for m in lm.requests[1].messages] == ["q", "yes", "are you sure?"]
    assert [m.text() for m in events[-1].messages or []] == ["yes", "are you sure?", "quite sure"]


async def test_follow_up_respects_max_turns() -> None:
    calls = 0

    def follow_up(produced: Any) -> list[Message]:
        nonlocal calls
        calls += 1
        return [user_message("more")]

    lm, loop = loop_for(["a", "b", "c"], hooks=Hooks(follow_up=follow_up), max_turns=2)
    await loop.run([user_message("q")]).wait()
    assert len(lm.requests) == 2
    assert calls == 1
