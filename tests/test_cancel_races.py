"""Cancel and concurrency races on one handle, in process.

Each race holds one write open after it reached the store (:class:`GatedStore`, a slow ``fsync``)
and delivers a cancellation, or starts another verb, inside that window. Afterwards the handle's
log must equal the store's, nothing may be stored twice as siblings, and every receipt must name
a stored entry. The same windows on the Temporal executor: tests/temporal/test_cancel_races.py.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from durable_agent import (
    Agent,
    Event,
    MessageEntry,
    RunCancelledError,
    RunStream,
    SessionExistsError,
    model,
    new,
)
from durable_agent.ai import ModelRequest, Reply, ScriptedModel, tool
from durable_agent.session import Entry, RetentionStore, SessionRecord, Store, encode_entry
from durable_agent.stores import FileStore, MemoryStore
from tests.durable_runs.test_steering import queued
from tests.support.gate_tool import GateTool
from tests.support.gated_store import GatedStore, has_role, has_text


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


@pytest.fixture(params=["memory", "file"])
def real_store(request: pytest.FixtureRequest, tmp_path: Path) -> RetentionStore:
    if request.param == "memory":
        return MemoryStore()
    return FileStore(tmp_path / "sessions")


def wires(entries: Sequence[Entry]) -> list[str]:
    return [encode_entry(e) for e in entries]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


async def assert_handle_matches_store(agent: Agent) -> list[Entry]:
    """The handle's log is exactly what the store holds, and its leaf is the last entry."""
    stored = await agent.store.load_entries(agent.session_id)
    assert wires(agent.entries()) == wires(stored)
    assert agent.leaf_id == (stored[-1].id if stored else "")
    return stored


def assert_receipts_stored(events: Sequence[Event], stored: Sequence[Entry]) -> None:
    by_id = {e.id: encode_entry(e) for e in stored}
    for event in events:
        for entry in event.entries or []:
            assert by_id.get(entry.id) == encode_entry(entry), f"receipt {entry.id} not stored"


async def consume(agent: Agent, stream: RunStream) -> list[Event]:
    """Every event until the stream ends (a cancelled run's ``events()`` raises at the end)."""
    events: list[Event] = []
    with pytest.raises(RunCancelledError):
        async for event in stream.events():
            events.append(event)
    assert not agent.running
    return events


async def cancel_inside_held_write(
    gated: GatedStore, cancel: Callable[[], Awaitable[None]]
) -> None:
    """Deliver ``cancel`` while the held write is open, then let the write return.

    ``stream.cancel()`` cancels the producer in its first step, before its first ``await``; that
    step runs before the ``release`` callback scheduled after it (asyncio runs callbacks in the
    order they were scheduled), so the cancellation reaches the run while its commit is in
    flight."""
    await gated.entered.wait()
    cancelling = asyncio.ensure_future(cancel())
    asyncio.get_running_loop().call_soon(gated.release.set)
    await cancelling


# -- 11.1: a commit that reached the store is applied before the cancellation proceeds --------


async def test_cancel_while_the_reply_is_written_keeps_one_reply(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(model(ScriptedModel(["the whole reply"])), store=gated, session_id="c-reply")
    gated.arm(has_role("assistant"))
    stream = await agent.run("q")
    reader = asyncio.ensure_future(consume(agent, stream))
    await cancel_inside_held_write(gated, stream.cancel)
    events = await reader

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["q", "the whole reply"]  # no aborted sibling copy
    reply = stored[1]
    assert isinstance(reply, MessageEntry) and reply.message.stop_reason != "aborted"
    ends = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert [e.entries for e in ends] == [[reply]]  # the reply got its receipt
    assert_receipts_stored(events, stored)


async def test_cancel_during_a_slow_fsync_of_the_reply_keeps_one_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's own reproduction: a real FileStore whose ``fsync`` of the reply is slow."""
    real_fsync = os.fsync
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()

    def slow_fsync(fd: int) -> None:
        if armed.is_set():
            armed.clear()
            entered.set()  # the reply's bytes are written; the sync is under way
            release.wait(30)
        real_fsync(fd)

    def respond(request: ModelRequest) -> Reply:
        armed.set()  # the input is stored: the next fsync is the reply's
        return Reply(text="the whole reply")

    monkeypatch.setattr(os, "fsync", slow_fsync)
    store = FileStore(tmp_path / "sessions")
    agent = await new(model(ScriptedModel(respond)), store=store, session_id="slow-fsync")
    stream = await agent.run("q")
    reader = asyncio.ensure_future(consume(agent, stream))
    assert await asyncio.to_thread(entered.wait, 30)
    cancelling = asyncio.ensure_future(stream.cancel())
    asyncio.get_running_loop().call_soon(release.set)  # after the cancel's first step
    await cancelling
    events = await reader

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["q", "the whole reply"]
    assert isinstance(stored[1], MessageEntry) and stored[1].message.stop_reason != "aborted"
    assert_receipts_stored(events, stored)
    assert any(e.entries == [stored[1]] for e in events)


async def test_cancel_while_a_tool_result_is_written_keeps_the_real_result(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(
        model(ScriptedModel([Reply.call("echo", {"text": "x"}, id="c1"), "unused"])),
        store=gated,
        session_id="c-result",
        tools=(echo,),
    )
    gated.arm(has_role("tool_result"))
    stream = await agent.run("go")
    reader = asyncio.ensure_future(consume(agent, stream))
    await cancel_inside_held_write(gated, stream.cancel)
    events = await reader

    stored = await assert_handle_matches_store(agent)
    # the tool really ran: its result is on the active path, with no "cancelled" twin
    assert stored_texts(stored) == ["go", "", "echo: x"]
    results = [e for e in stored if isinstance(e, MessageEntry) and e.message.role == "tool_result"]
    assert [r.message.tool_call_id for r in results] == ["c1"]
    assert agent.leaf_id == results[0].id
    assert_receipts_stored(events, stored)
    assert any(e.entries == [results[0]] for e in events)


async def test_cancel_while_the_run_input_is_written_keeps_the_input(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(model(ScriptedModel(["unused"])), store=gated, session_id="c-input")
    await agent.append("before")
    gated.arm(has_text("the input"))
    stream = await agent.run("the input")
    reader = asyncio.ensure_future(consume(agent, stream))
    await cancel_inside_held_write(gated, stream.cancel)
    events = await reader

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["before", "the input"]
    assert events and events[0].entries == [stored[1]]  # agent_start carried the input's receipt
    # the next entry chains from the input instead of becoming its sibling
    (after,) = await agent.append("after")
    assert after.parent_id == stored[1].id
    await assert_handle_matches_store(agent)


async def test_cancel_while_an_append_is_written_keeps_the_entry(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(None, store=gated, session_id="c-append")
    await agent.append("one")
    gated.arm(has_text("two"))
    appending = asyncio.ensure_future(agent.append("two"))
    await gated.entered.wait()
    appending.cancel()
    gated.release.set()
    with pytest.raises(asyncio.CancelledError):
        await appending

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["one", "two"]
    (three,) = await agent.append("three")
    assert three.parent_id == stored[1].id


async def test_cancel_while_a_steer_is_written_stores_each_queued_message_once(
    real_store: RetentionStore,
) -> None:
    """Two steers are due at a turn's end; the cancel lands while the first is written: it gets
    its receipt, the second is stored by the cancellation, each once, in the order received."""
    gated, gate = GatedStore(real_store), GateTool()
    agent = await new(
        model(ScriptedModel([Reply.call("gate", id="g1"), "unused"])),
        store=gated,
        session_id="c-steer",
        tools=(gate.tool,),
    )
    stream = await agent.run("go")
    reader = asyncio.ensure_future(consume(agent, stream))
    await gate.started.wait()
    sends = [asyncio.ensure_future(stream.send(t)) for t in ("one", "two")]
    await queued(agent, 2)
    gated.arm(has_text("one"))
    gate.release.set()
    await cancel_inside_held_write(gated, stream.cancel)
    events = await reader
    sent = [await asyncio.wait_for(s, 30) for s in sends]

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["go", "", "opened", "one", "two"]
    assert [e.id for e in sent] == [e.id for e in stored[3:]]
    delivered = [e.entries for e in events if e.agent and e.agent.type == "input_delivered"]
    assert delivered == [[stored[3]], [stored[4]]]
    assert_receipts_stored(events, stored)


# -- 11.2: a run starts from the leaf as it is after in-flight writes --------------------------


async def test_run_started_during_an_append_chains_from_the_appended_entry(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(model(ScriptedModel(["answer"])), store=gated, session_id="r-append")
    await agent.append("first")
    gated.arm(has_text("appended"))
    appending = asyncio.ensure_future(agent.append("appended"))
    await gated.entered.wait()
    starting = asyncio.ensure_future(agent.run("question"))
    gated.release.set()
    (appended,) = await appending
    stream = await starting
    events = [e async for e in stream.events()]

    stored = await assert_handle_matches_store(agent)
    assert stored_texts(stored) == ["first", "appended", "question", "answer"]
    question = stored[2]
    assert question.parent_id == appended.id  # not a sibling of the appended entry
    assert events[0].entries == [question]
    reopened = await new(None, store=real_store, session_id="r-append")
    assert [e.id for e in reopened.transcript()] == [e.id for e in stored]


async def test_run_started_while_a_branch_waits_for_the_lock_starts_at_the_branch(
    real_store: RetentionStore,
) -> None:
    gated = GatedStore(real_store)
    agent = await new(model(ScriptedModel(["answer"])), store=gated, session_id="r-branch")
    (root,) = await agent.append("root")
    await agent.append("side")
    gated.arm(has_text("appended"))
    appending = asyncio.ensure_future(agent.append("appended"))
    await gated.entered.wait()
    branching = asyncio.ensure_future(agent.branch(root.id))  # waits for the append's lock
    starting = asyncio.ensure_future(agent.run("question"))
    gated.release.set()
    await appending
    await branching
    stream = await starting
    await stream.wait()

    stored = await assert_handle_matches_store(agent)
    question = next(e for e in stored if stored_texts([e]) == ["question"])
    assert question.parent_id == root.id  # where the branch put the leaf before the run began
    assert [e.id for e in agent.transcript()] == [root.id, question.id, stored[-1].id]


# -- 11.5: an oversized tool result is answered, the run goes on -------------------------------


@tool
async def big() -> str:
    """Return more than the store takes in one entry."""
    return "x" * 20_000


async def test_oversized_tool_result_is_answered_with_a_failure_and_the_run_continues() -> None:
    store = MemoryStore(max_entry_bytes=8_000)
    lm = ScriptedModel([Reply.call("big", id="b1"), "carried on", "next answer"])
    agent = await new(model(lm), store=store, session_id="too-big", tools=(big,))
    stream = await agent.run("go")
    messages = await stream.wait()

    stored = await assert_handle_matches_store(agent)
    result = stored[2]
    assert isinstance(result, MessageEntry) and result.message.role == "tool_result"
    assert result.message.tool_call_id == "b1" and result.message.is_error
    assert result.message.text().startswith("tool execution failed: EntryTooLargeError: ")
    assert stored_texts(stored)[-1] == "carried on"
    assert [m.text() for m in messages][-1] == "carried on"
    # the run's own next model call, and its result, already go on with the stored failure
    second_call = lm.requests[1].messages
    assert result.message.text() in [m.text() for m in second_call]
    assert all(len(m.text()) < 8_000 for m in second_call)
    assert messages[1] == result.message
    # the next run's model sees the stored failure, not the result the store refused
    await (await agent.run("next")).wait()
    assert result.message.text() in [m.text() for m in lm.requests[-1].messages]
    assert all(len(m.text()) < 8_000 for m in lm.requests[-1].messages)


# -- 11.6: fork through a store with only the protocol's three verbs ---------------------------


class ThreeVerbs:
    """A store with only the protocol's verbs (no ``load_session``)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        await self.inner.append_entries(session_id, entries)


async def test_fork_without_load_session_refuses_an_existing_session(real_store: Store) -> None:
    store = ThreeVerbs(real_store)
    source = await new(None, store=store, session_id="fork-src")
    await source.append("mine")
    await real_store.create_session("unrelated")  # another user's session, nothing in it yet
    with pytest.raises(SessionExistsError, match="load_session"):
        await source.fork("unrelated")
    assert await real_store.load_entries("unrelated") == []  # not adopted
    # a new child ID still forks through the three verbs
    child = await source.fork("fork-new-child")
    assert stored_texts(await real_store.load_entries("fork-new-child")) == ["mine"]
    assert stored_texts(child.entries()) == ["mine"]
