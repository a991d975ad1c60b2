"""Run middleware and ``fail`` (SPEC §4.10). Middleware runs on the client, so these tests are
in-process and call ``new`` directly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from durable_agent import (
    AgentClosedError,
    MessageEntry,
    RunActiveError,
    RunStream,
    ephemeral,
    fail,
    meta,
    model,
    new,
)
from durable_agent.ai import ModelEvent, ModelRequest, ScriptedModel
from durable_agent.durable import Middleware, Runner
from durable_agent.session import Entry
from durable_agent.stores import MemoryStore


def named(name: str, log: list[str]) -> Middleware:
    def middleware(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            log.append(name)
            stream = await next_(entries)
            log.append(f"{name} done")
            return stream

        return run

    return middleware


async def test_first_listed_is_outermost() -> None:
    log: list[str] = []
    agent = await new(
        model(ScriptedModel(["ok"])),
        middleware=(named("first", log), named("second", log), named("third", log)),
    )
    await (await agent.run("hi")).wait()
    assert log == ["first", "second", "third", "third done", "second done", "first done"]


async def test_applied_once_per_instance_with_per_instance_state() -> None:
    built: list[str] = []

    def counting(next_: Runner) -> Runner:
        built.append("built")
        runs = 0

        async def run(entries: list[Entry]) -> RunStream:
            nonlocal runs
            runs += 1
            return await next_([*entries, meta(f"run {runs}")])

        return run

    lm = ScriptedModel(["a", "b", "c", "d"])
    store = MemoryStore()
    one = await new(model(lm), store=store, session_id="mw-1", middleware=(counting,))
    assert built == ["built"]
    await (await one.run("x")).wait()
    await (await one.run("y")).wait()
    assert built == ["built"]  # not per run
    assert lm.requests[1].messages[-1].text() == "run 2"
    two = await new(model(lm), store=store, session_id="mw-2", middleware=(counting,))
    await (await two.run("z")).wait()
    assert lm.requests[2].messages[-1].text() == "run 1"  # its own closure
    child = await one.fork("mw-1-child")  # a fresh chain for the child
    assert built == ["built", "built", "built"]
    await (await child.run("w")).wait()
    assert lm.requests[3].messages[-1].text() == "run 1"


async def test_runs_on_the_callers_task_and_reminder_is_in_place() -> None:
    caller = asyncio.current_task()
    seen: dict[str, object] = {}

    def reminder(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            seen["task"] = asyncio.current_task()
            seen["input"] = list(entries)
            stream = await next_([ephemeral("REMINDER: be brief"), *entries])
            seen["done"] = True
            return stream

        return run

    lm = ScriptedModel(["short"])
    agent = await new(model(lm), middleware=(reminder,))
    stream = await agent.run("hi")
    # the middleware has already run, on this task, when run returns
    assert seen["task"] is caller and seen.get("done") is True
    given_entries = seen["input"]
    assert isinstance(given_entries, list)
    (given,) = given_entries
    assert isinstance(given, MessageEntry) and given.message.text() == "hi"
    await stream.wait()
    assert [m.text() for m in lm.requests[0].messages] == ["REMINDER: be brief", "hi"]
    log = agent.entries()
    assert [e.message.text() for e in log if isinstance(e, MessageEntry)] == [
        "REMINDER: be brief",
        "hi",
        "short",
    ]
    assert isinstance(log[0], MessageEntry) and log[0].ephemeral
    stored = await agent.store.load_entries(agent.session_id)
    assert [e.message.text() for e in stored if isinstance(e, MessageEntry)] == ["hi", "short"]
    assert [m.text() for m in agent.messages()] == ["hi", "short"]


async def test_fail_refuses_the_run() -> None:
    denied = PermissionError("over quota")
    refuse = True

    def gate(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            if refuse:
                return fail(denied)
            return await next_(entries)

        return run

    lm = ScriptedModel(["allowed"])
    agent = await new(model(lm), middleware=(gate,))
    stream = await agent.run("hi")
    assert not agent.running
    with pytest.raises(PermissionError) as info:
        await stream.wait()
    assert info.value is denied
    with pytest.raises(PermissionError):
        async for _ in stream.events():
            pass
    await stream.cancel()  # a no-op
    assert lm.requests == []
    assert agent.entries() == [] and agent.leaf_id == ""
    assert await agent.store.load_entries(agent.session_id) == []
    refuse = False
    assert [m.text() for m in await (await agent.run("again")).wait()] == ["allowed"]


async def test_fail_stream_events_once() -> None:
    stream = fail(ValueError("no"))
    with pytest.raises(ValueError):
        async for _ in stream.events():
            pass
    with pytest.raises(RuntimeError):
        stream.events()


async def test_middleware_exception_propagates_from_run() -> None:
    def broken(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            raise LookupError("no such tenant")

        return run

    agent = await new(model(ScriptedModel(["x"])), middleware=(broken,))
    with pytest.raises(LookupError):
        await agent.run("hi")
    assert not agent.running and agent.entries() == []


async def test_base_runner_rechecks_the_busy_rule() -> None:
    """A middleware that starts two runs gets RunActiveError from the second."""
    errors: list[BaseException] = []

    def twice(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            stream = await next_(entries)
            try:
                await next_(entries)
            except RunActiveError as exc:
                errors.append(exc)
            return stream

        return run

    agent = await new(model(ScriptedModel(["once"])), middleware=(twice,))
    await (await agent.run("hi")).wait()
    assert len(errors) == 1
    stored = await agent.store.load_entries(agent.session_id)
    assert len(stored) == 2


async def test_closed_and_busy_checks_come_before_the_middleware() -> None:
    calls: list[str] = []
    release = asyncio.Event()

    def recording(next_: Runner) -> Runner:
        async def run(entries: list[Entry]) -> RunStream:
            calls.append("middleware")
            return await next_(entries)

        return run

    class Held:
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            await release.wait()
            async for event in ScriptedModel(["done"]).stream(request):
                yield event

    agent = await new(model(Held()), middleware=(recording,))
    stream = await agent.run("first")
    assert calls == ["middleware"]
    with pytest.raises(RunActiveError):
        await agent.run("busy")
    assert calls == ["middleware"]
    release.set()
    await stream.wait()
    await agent.close()
    with pytest.raises(AgentClosedError):
        await agent.run("closed")
    assert calls == ["middleware"]
