"""The inner loop's tools (``durable_agent.agent``): parallel and sequential calls, progress,
failures, retries and timeouts, cancellation, ``max_turns``.

These drive :class:`ModelLoop` directly with a :class:`ScriptedModel`; nothing is stored here (the
durable layer is tested in ``test_durable_*``).
"""

from __future__ import annotations

import asyncio

import pytest

from durable_agent.agent import (
    LocalToolExecutor,
    failure_text,
)
from durable_agent.ai import (
    Reply,
    RetryPolicy,
    ToolCall,
    ToolContext,
    tool,
    user_message,
)
from tests.support.loops import collect, echo, loop_for, types, without_updates

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


async def test_a_tool_error_is_redacted_of_the_process_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The failure result is stored and sent to the model: a client library's error carrying
    the process's credential (a URL's ``key=``) reaches neither."""
    key = "sk-test-SECRET123456abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    @tool(retry=RetryPolicy(max_attempts=1))
    async def leaky() -> str:
        raise RuntimeError(f"GET https://api.example/v1?key={key[3:]}: 401")

    _, loop = loop_for([Reply.call("leaky", id="k1"), "ok"], tools=(leaky,))
    messages = await loop.run([user_message("go")]).wait()
    text = messages[1].text()
    assert text.startswith("tool execution failed: RuntimeError: GET https://api.example/v1?key=")
    assert "SECRET123456" not in text


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
