"""The inner loop (``durable_agent.agent``): event order, hooks, retries,
``model(lm)`` (tools: tests/test_agent_tools.py).

These drive :class:`ModelLoop` directly with a :class:`ScriptedModel`; nothing is stored here (the
durable layer is tested in ``test_durable_*``).
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agent.agent import (
    AgentOptions,
    Hooks,
    ModelLoop,
    RetryingModel,
    build_loop,
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
    Usage,
    tool,
    tool_result_message,
    user_message,
)
from tests.durable_runs.support import ONE_TOOL_TURN
from tests.support.loops import collect, echo, loop_for, types, without_updates

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
