"""Tool calls in a run: parallel and sequential execution, stored failures
(docs/design.md#repair-and-reconcile)."""

from __future__ import annotations

import asyncio

import pytest

from durable_agent import (
    MessageEntry,
    model,
    new,
)
from durable_agent.ai import (
    Reply,
    RetryPolicy,
    ScriptedModel,
    ToolCall,
    tool,
)
from durable_agent.session import Store
from tests.durable_runs.support import (
    assert_chain,
    collect,
    stored_texts,
)
from tests.support.harness import Harness

# -- tools ------------------------------------------------------------------------------------


async def test_parallel_tools_overlap_results_stored_in_call_order() -> None:
    a_started = asyncio.Event()
    b_done = asyncio.Event()
    finished: list[str] = []

    @tool
    async def work(name: str) -> str:
        """a finishes only after b, b starts only once a runs: the calls must overlap."""
        if name == "a":
            a_started.set()
            await b_done.wait()
        else:
            await a_started.wait()
            b_done.set()
        finished.append(name)
        return f"done {name}"

    calls = [
        ToolCall(id="ca", name="work", arguments={"name": "a"}),
        ToolCall(id="cb", name="work", arguments={"name": "b"}),
    ]
    agent = await new(model(ScriptedModel([Reply(tool_calls=calls), "both"])), tools=(work,))
    stream = await agent.run("go")
    events = await asyncio.wait_for(collect(stream), 10)
    assert finished == ["b", "a"]
    stored = await agent.store.load_entries(agent.session_id)
    results = [e.message for e in stored if isinstance(e, MessageEntry)][2:4]
    assert [m.tool_call_id for m in results] == ["ca", "cb"]
    assert_chain(stored)
    receipt_ids = [
        e.agent.message.tool_call_id
        for e in events
        if e.agent is not None and e.agent.type == "message_end" and e.agent.message is not None
    ]
    assert receipt_ids == [None, "ca", "cb", None]


async def test_parallel_unsafe_tool_runs_sequentially(harness: Harness, store: Store) -> None:
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

    calls = [ToolCall(id="c1", name="exclusive"), ToolCall(id="c2", name="normal")]
    agent = await harness.open(
        [Reply(tool_calls=calls), "ok"],
        store=store,
        session_id="sequential",
        tools=[exclusive, normal],
    )
    running = asyncio.ensure_future(collect(await agent.run("go")))
    await started.wait()
    # a concurrently scheduled call would have started while exclusive holds (the tool order
    # below proves the same from the stream, on every executor)
    assert log == ["exclusive start"]
    release.set()
    events = await running
    assert log == ["exclusive start", "exclusive end", "normal start"]
    tool_events = [
        (e.agent.type, e.agent.tool_call_id)
        for e in events
        if e.agent is not None and e.agent.type in ("tool_execution_start", "tool_execution_end")
    ]
    assert tool_events == [
        ("tool_execution_start", "c1"),
        ("tool_execution_end", "c1"),
        ("tool_execution_start", "c2"),
        ("tool_execution_end", "c2"),
    ]


@pytest.mark.parametrize(
    ("error", "max_attempts", "attempts_made", "says"),
    [
        (RuntimeError("no such file"), 2, 2, "RuntimeError: no such file"),
        (KeyError("missing"), 5, 1, "KeyError: 'missing'"),
    ],
    ids=["after-retries", "non-retryable"],
)
async def test_a_tool_failure_is_stored(
    harness: Harness,
    store: Store,
    error: Exception,
    max_attempts: int,
    attempts_made: int,
    says: str,
) -> None:
    """A tool that keeps failing is tried until its retry policy gives up (a ``KeyError`` is
    not retried at all); its failure is stored as the call's error result and the run goes on."""
    attempts = 0

    @tool(retry=RetryPolicy(max_attempts=max_attempts, initial_interval=0))
    async def broken() -> str:
        nonlocal attempts
        attempts += 1
        raise type(error)(*error.args)

    agent = await harness.open(
        [Reply.call("broken", id="b1"), "sorry"],
        store=store,
        session_id="tool-fails",
        tools=[broken],
    )
    await (await agent.run("go")).wait()
    assert attempts == attempts_made
    stored = await store.load_entries("tool-fails")
    result = stored[2]
    assert isinstance(result, MessageEntry)
    assert result.message.role == "tool_result" and result.message.is_error
    assert result.message.text() == f"tool execution failed: {says}"
    assert stored_texts(stored)[-1] == "sorry"
