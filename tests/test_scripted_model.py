"""ScriptedModel (SPEC §1.1 LanguageModel.stream): streaming, failures, delays, recording."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from datetime import UTC, datetime

import pytest

from durable_agent.ai import (
    LanguageModel,
    Message,
    ModelError,
    ModelEvent,
    ModelRequest,
    Reply,
    ScriptedModel,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolSpec,
    Usage,
    user_message,
)


def request(text: str = "hi", system: str = "") -> ModelRequest:
    return ModelRequest(system_prompt=system, messages=[user_message(text)])


async def collect(model: ScriptedModel, req: ModelRequest | None = None) -> list[ModelEvent]:
    return [e async for e in model.stream(req or request())]


async def collect_until_error(
    model: ScriptedModel, req: ModelRequest | None = None
) -> tuple[list[ModelEvent], ModelError]:
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as info:
        async for e in model.stream(req or request()):
            events.append(e)
    return events, info.value


def test_is_a_language_model() -> None:
    assert isinstance(ScriptedModel([]), LanguageModel)


async def test_text_reply_streams_start_deltas_done() -> None:
    text = "Hello there, durable world!"
    model = ScriptedModel([Reply(text=text)], provider="prov", model="m-1")
    before = datetime.now(UTC)
    events = await collect(model)
    types = [e.type for e in events]
    assert types[0] == "start"
    assert types[-1] == "done"
    assert set(types[1:-1]) == {"text_delta"}
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert len(deltas) == 4  # 27 characters in chunks of 8
    assert all(len(d) == 8 for d in deltas[:-1])
    assert "".join(deltas) == text
    assert events[0].partial.content == []
    done = events[-1].message
    assert done.role == "assistant"
    assert done.content == [TextContent(text=text)]
    assert (done.api, done.provider, done.model) == ("scripted", "prov", "m-1")
    assert done.stop_reason == "stop"
    assert done.timestamp is not None and done.timestamp >= before
    assert done.usage is not None and done.usage.input > 0 and done.usage.output > 0


async def test_partial_messages_accumulate() -> None:
    text = "abcdefghijklmnopqrstuvwxyz"
    events = await collect(ScriptedModel([Reply(text=text, chunk_size=5)]))
    deltas = [e for e in events if e.type == "text_delta"]
    acc = ""
    for e in deltas:
        acc += e.delta
        assert e.partial.text() == acc
        assert e.index == 0
        assert e.message is e.partial
        assert e.partial.stop_reason is None
    assert acc == text


async def test_string_script_entries_are_text_replies() -> None:
    model = ScriptedModel(["one", "two"])
    assert (await collect(model))[-1].message.text() == "one"
    assert (await collect(model))[-1].message.text() == "two"


async def test_thinking_with_signature_then_text() -> None:
    reply = Reply(thinking="let me think hard", thinking_signature="sig-123", text="answer")
    events = await collect(ScriptedModel([reply]))
    thinking = [e for e in events if e.type == "thinking_delta"]
    text = [e for e in events if e.type == "text_delta"]
    assert thinking and text
    assert events.index(thinking[-1]) < events.index(text[0])
    assert "".join(e.delta for e in thinking) == "let me think hard"
    for e in thinking:
        block = e.partial.content[-1]
        assert isinstance(block, ThinkingContent)
        assert block.signature == "sig-123"
    assert all(e.index == 1 for e in text)
    done = events[-1].message
    assert done.content == [
        ThinkingContent(thinking="let me think hard", signature="sig-123"),
        TextContent(text="answer"),
    ]


async def test_tool_calls_stream_arguments_and_stop_with_tool_use() -> None:
    args = {"text": "a fairly long argument so that it takes more than one chunk", "n": 3}
    call = ToolCall(id="call-1", name="echo", arguments=args)
    events = await collect(ScriptedModel([Reply(text="calling", tool_calls=[call])]))
    call_deltas = [e for e in events if e.type == "tool_call_delta"]
    assert len(call_deltas) > 1
    assert "".join(e.delta for e in call_deltas) == json.dumps(args)
    for e in call_deltas:
        assert e.index == 1
        partial_call = e.partial.content[-1]
        assert isinstance(partial_call, ToolCall)
        assert (partial_call.id, partial_call.name) == ("call-1", "echo")
    done = events[-1].message
    assert done.content == [TextContent(text="calling"), call]
    assert done.tool_calls() == [call]
    assert done.stop_reason == "tool_use"


async def test_reply_call_shorthand() -> None:
    reply = Reply.call("lookup", {"k": "v"}, id="c9")
    assert reply.tool_calls == [ToolCall(id="c9", name="lookup", arguments={"k": "v"})]
    assert reply.text == ""
    done = (await collect(ScriptedModel([reply])))[-1].message
    assert done.content == [ToolCall(id="c9", name="lookup", arguments={"k": "v"})]
    assert done.stop_reason == "tool_use"
    assert Reply.call("now", id="c0").tool_calls[0].arguments == {}


async def test_server_only_calls_stop_normally() -> None:
    server = ToolCall(id="s1", name="web_search", server=True)
    done = (await collect(ScriptedModel([Reply(tool_calls=[server])])))[-1].message
    assert done.tool_calls() == [server]
    assert done.stop_reason == "stop"


async def test_explicit_usage_and_stop_reason_win() -> None:
    usage = Usage(input=100, output=7, cache_read=3)
    model = ScriptedModel([Reply(text="cut", usage=usage, stop_reason="length")])
    done = (await collect(model))[-1].message
    assert done.usage == usage
    assert done.stop_reason == "length"


async def test_default_usage_estimates_tokens() -> None:
    req = ModelRequest(system_prompt="x" * 40, messages=[user_message("y" * 40)])
    done = (await collect(ScriptedModel([Reply(text="z" * 20, thinking="t" * 20)]), req))[-1]
    assert done.message.usage == Usage(input=80 // 4 + 1, output=40 // 4 + 1)


async def test_error_alone_fails_before_any_event() -> None:
    boom = ModelError("rate limited", retryable=True, retry_after=2.0)
    model = ScriptedModel([Reply(error=boom), "after"])
    events, err = await collect_until_error(model)
    assert events == []
    assert err is boom
    assert err.retryable is True
    assert err.retry_after == 2.0
    assert (await collect(model))[-1].message.text() == "after"


async def test_error_after_text_cuts_the_stream() -> None:
    cut = ModelError("connection reset", retryable=True)
    events, err = await collect_until_error(
        ScriptedModel([Reply(text="partial answer here", error=cut)])
    )
    assert err is cut
    assert events[0].type == "start"
    assert "done" not in [e.type for e in events]
    assert events[-1].type == "text_delta"
    assert events[-1].partial.text() == "partial answer here"


async def test_exhausted_script_raises_non_retryable() -> None:
    model = ScriptedModel(["only"])
    assert model.remaining == 1
    await collect(model)
    assert model.remaining == 0
    events, err = await collect_until_error(model)
    assert events == []
    assert err.retryable is False
    assert "exhausted" in str(err)
    assert len(model.requests) == 2


async def test_records_requests_in_order() -> None:
    model = ScriptedModel(["a", Reply(error=ModelError("x", retryable=True)), "b"])
    spec = ToolSpec(name="echo")
    r1 = ModelRequest(system_prompt="sys", messages=[user_message("1")], tools=[spec])
    r2 = request("2")
    r3 = request("3")
    await collect(model, r1)
    await collect_until_error(model, r2)
    await collect(model, r3)
    assert model.requests == [r1, r2, r3]
    assert model.requests[0] is r1
    assert model.requests[0].tools == [spec]


async def test_responder_function_mode() -> None:
    seen: list[int] = []

    def respond(req: ModelRequest) -> Reply:
        seen.append(len(req.messages))
        last = req.messages[-1].text()
        if last == "fail":
            return Reply(error=ModelError("bad request", retryable=False))
        return Reply(text=f"echo: {last}")

    model = ScriptedModel(respond)
    assert (await collect(model, request("one")))[-1].message.text() == "echo: one"
    assert (await collect(model, request("one")))[-1].message.text() == "echo: one"
    _, err = await collect_until_error(model, request("fail"))
    assert err.retryable is False
    assert seen == [1, 1, 1]
    assert len(model.requests) == 3
    assert model.remaining == 0


async def test_initial_delay_is_cancellable() -> None:
    reached = asyncio.Event()

    def respond(req: ModelRequest) -> Reply:
        reached.set()  # called right before the stream waits out the delay
        return Reply(text="late", delay=3600)

    model = ScriptedModel(respond)
    task = asyncio.ensure_future(collect(model))
    await reached.wait()
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 5
    assert len(model.requests) == 1


async def test_chunk_delay_is_cancellable() -> None:
    model = ScriptedModel([Reply(text="x" * 40, chunk_delay=3600)])
    stream = model.stream(request())
    first = await anext(stream)
    assert first.type == "start"
    started = time.monotonic()
    # awaited in this task, the next event can only be waiting out the first chunk's delay
    # when the timeout cancels it
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await anext(stream)
    assert time.monotonic() - started < 5


async def test_delay_under_timeout_raises_timeout() -> None:
    model = ScriptedModel([Reply(text="late", delay=3600)])
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await collect(model)


def test_model_error_pickles_with_its_flags() -> None:
    err = ModelError("overloaded", retryable=True, retry_after=1.5)
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, ModelError)
    assert str(back) == "overloaded"
    assert back.retryable is True
    assert back.retry_after == 1.5
    plain = pickle.loads(pickle.dumps(ModelError("auth", retryable=False)))
    assert plain.retryable is False
    assert plain.retry_after is None


def test_model_event_message_is_partial() -> None:
    m = Message(role="assistant")
    e = ModelEvent(type="done", partial=m)
    assert e.message is m
    assert e.delta == ""
    assert e.index == 0


def test_request_defaults() -> None:
    r = ModelRequest()
    assert (r.system_prompt, r.messages, r.tools, r.options) == ("", [], [], {})
    assert ToolSpec(name="t").parameters == {"type": "object", "properties": {}}
