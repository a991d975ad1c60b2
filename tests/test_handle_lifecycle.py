"""The durable agent API (docs/design.md#handle-and-engine), second half: close, the busy rule,
persist failures during a run, the error tree.

Scenarios that need only a scripted model, tools and plain options go through ``harness.open`` so
they also run on the Temporal executor; the rest (custom factories, ``factory=None``) are
in-process only and call ``new`` directly.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agent import (
    AgentClosedError,
    AgentError,
    CompactError,
    CompactionEntry,
    CorruptSessionError,
    CustomEntry,
    EntryConflictError,
    EntryDecodeError,
    EntryNotFoundError,
    EntryTooLargeError,
    EventGapError,
    InvalidSessionIdError,
    MessageEntry,
    NoFactoryError,
    PayloadTooLargeError,
    PersistError,
    RunActiveError,
    RunCancelledError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    ephemeral,
    meta,
    model,
    new,
)
from durable_agent.ai import (
    Reply,
    ScriptedModel,
    TextContent,
    ToolCall,
    assistant_message,
)
from durable_agent.durable import Agent
from durable_agent.session import RetentionStore, Store
from tests.support.gate_tool import GateTool
from tests.support.handles import WrappedStore, stored_texts, texts, too_large
from tests.support.harness import Harness

# -- close ------------------------------------------------------------------------------------


async def test_close_refuses_mutations_reads_work_and_new_resumes(
    harness: Harness, store: Store
) -> None:
    agent = await harness.open(["a"], store=store, session_id="closing")
    await (await agent.run("q")).wait()
    leaf = agent.leaf_id
    await agent.close()
    await agent.close()  # idempotent
    assert agent.closed
    with pytest.raises(AgentClosedError):
        await agent.run("again")
    with pytest.raises(AgentClosedError):
        await agent.append("again")
    with pytest.raises(AgentClosedError):
        await agent.branch("")
    with pytest.raises(AgentClosedError):
        await agent.fork("closing-child")
    with pytest.raises(AgentClosedError):
        await agent.compact()
    assert texts(agent.messages()) == ["q", "a"] and agent.leaf_id == leaf
    assert len(agent.entries()) == 2 and len(agent.transcript()) == 2
    assert len(await store.load_entries("closing")) == 2
    reopened = await harness.open([], store=store, session_id="closing")
    assert reopened.leaf_id == leaf


async def test_async_context_manager_closes(harness: Harness, store: Store) -> None:
    async with await harness.open([], store=store, session_id="ctx") as agent:
        await agent.append("x")
    assert agent.closed
    with pytest.raises(AgentClosedError):
        await agent.append("y")


async def test_close_neither_waits_for_nor_cancels_a_run(harness: Harness, store: Store) -> None:
    gate = GateTool()
    agent = await harness.open(
        [Reply.call("gate", id="g1"), "after"],
        store=store,
        session_id="close-run",
        tools=[gate.tool],
    )
    stream = await agent.run("go")
    await gate.started.wait()
    await agent.close()  # returns while the tool is still blocked
    assert agent.closed and agent.running
    gate.release.set()
    messages = await stream.wait()
    assert texts(messages) == ["", "opened", "after"]
    assert len(await store.load_entries("close-run")) == 4
    with pytest.raises(AgentClosedError):
        await agent.run("more")


# -- the busy rule ----------------------------------------------------------------------------


async def test_busy_rule_during_a_run(harness: Harness, store: Store) -> None:
    gate = GateTool()
    agent = await harness.open(
        ["first", Reply.call("gate", id="g1"), "after", "later"],
        store=store,
        session_id="busy",
        tools=[gate.tool],
    )
    await (await agent.run("warm up")).wait()
    first_leaf = agent.leaf_id
    stream = await agent.run("go")
    events = stream.events()
    async for event in events:  # the assistant's receipt comes before the tool starts
        if event.agent is not None and event.agent.type == "tool_execution_start":
            break
    await gate.started.wait()
    assert agent.running
    with pytest.raises(RunActiveError):
        await agent.run("second")
    with pytest.raises(RunActiveError):
        await agent.append("x")
    with pytest.raises(RunActiveError):
        await agent.branch(first_leaf)
    with pytest.raises(RunActiveError):
        await agent.compact()
    # reads and fork work; the fork copies the path as of the latest receipt
    assert texts(agent.messages())[:4] == ["warm up", "first", "go", ""]
    child = await agent.fork("busy-child")
    assert texts(child.messages())[:4] == ["warm up", "first", "go", ""]
    assert len(await store.load_entries("busy-child")) == 4
    gate.release.set()
    async for _ in events:
        pass
    assert not agent.running
    await (await agent.run("again")).wait()
    assert texts(agent.messages())[-2:] == ["again", "later"]


async def test_a_failed_run_clears_the_flags(harness: Harness, store: Store) -> None:
    from durable_agent import ModelError

    agent = await harness.open(
        [Reply(error=ModelError("bad request", retryable=False)), "fine"],
        store=store,
        session_id="flags",
    )
    stream = await agent.run("one")
    with pytest.raises(ModelError):
        await stream.wait()
    assert not agent.running
    await (await agent.run("two")).wait()
    assert texts(agent.messages()) == ["one", "two", "fine"]


# -- persist failures during a run --------------------------------------------------------------


async def test_input_persist_failure(harness: Harness, store: RetentionStore) -> None:
    wrapped = WrappedStore(store)
    lm = ScriptedModel(["never"])
    agent = await harness.open(lm, store=wrapped, session_id="input-fails")
    await agent.append("kept")
    before = (agent.entries(), agent.leaf_id)
    wrapped.fail_appends.append(too_large("input-fails"))
    stream = await agent.run("lost")
    seen = []
    with pytest.raises(PersistError) as info:
        async for event in stream.events():
            seen.append(event)
    assert seen == []  # nothing is emitted before its persist succeeds
    assert str(info.value).startswith("persist input: ")
    assert info.value.__cause__ is not None
    with pytest.raises(PersistError):
        await stream.wait()
    assert (agent.entries(), agent.leaf_id) == before
    assert not agent.running
    assert lm.requests == []
    assert stored_texts(await store.load_entries("input-fails")) == ["kept"]


async def test_input_persist_failure_chains_the_store_error(store: RetentionStore) -> None:
    wrapped = WrappedStore(store)
    agent = await new(model(ScriptedModel(["never"])), store=wrapped, session_id="chained")
    boom = too_large("chained")
    wrapped.fail_appends.append(boom)
    with pytest.raises(PersistError) as info:
        await (await agent.run("x")).wait()
    assert info.value.__cause__ is boom
    assert str(info.value) == f"persist input: {boom}"


async def test_message_persist_failure(harness: Harness, store: RetentionStore) -> None:
    wrapped = WrappedStore(store)
    agent = await harness.open(["reply", "spare"], store=wrapped, session_id="msg-fails")
    wrapped.fail_appends.extend([None, too_large("msg-fails")])
    stream = await agent.run("question")
    seen = []
    with pytest.raises(PersistError) as info:
        async for event in stream.events():
            seen.append(event)
    assert str(info.value).startswith("persist message: ")
    assert info.value.__cause__ is not None
    assert seen[0].agent is not None and seen[0].agent.type == "agent_start"
    assert all(e.agent is not None and e.agent.type != "message_end" for e in seen)
    stored = await store.load_entries("msg-fails")
    assert stored_texts(stored) == ["question"]
    assert agent.leaf_id == stored[-1].id
    assert not agent.running


async def test_create_false_opens_only_a_stored_session_and_never_creates_it(
    harness: Harness, store: RetentionStore
) -> None:
    with pytest.raises(SessionNotFoundError):
        await harness.open([], store=store, session_id="absent", create=False)
    with pytest.raises(SessionNotFoundError):
        await store.load_session("absent")
    first = await harness.open([], store=store, session_id="kept")
    await first.append("x")
    opened = await harness.open([], store=store, session_id="kept", create=False)
    assert stored_texts(await store.load_entries("kept")) == ["x"] == texts(opened.messages())
    await store.delete_session("kept")  # a delete landing while the handle is open
    with pytest.raises(SessionNotFoundError):
        await opened.append("y")
    with pytest.raises(SessionNotFoundError):
        await store.load_session("kept")  # not brought back, not even empty


# -- errors -----------------------------------------------------------------------------------


def test_error_hierarchy() -> None:
    for cls in (
        SessionNotFoundError,
        SessionExistsError,
        InvalidSessionIdError,
        EntryConflictError,
        EntryDecodeError,
        CorruptSessionError,
        EntryTooLargeError,
        StoreUnavailableError,
    ):
        assert issubclass(cls, SessionError)
    assert issubclass(SessionNotFoundError, LookupError)
    assert issubclass(InvalidSessionIdError, ValueError)
    for agent_error in (
        AgentClosedError,
        RunActiveError,
        NoFactoryError,
        EntryNotFoundError,
        PersistError,
        CompactError,
        RunCancelledError,
        PayloadTooLargeError,
        EventGapError,
    ):
        assert issubclass(agent_error, AgentError)
    assert issubclass(EntryNotFoundError, LookupError)
    assert not issubclass(AgentError, SessionError)


def test_agent_is_exported() -> None:
    import durable_agent

    assert durable_agent.Agent is Agent


async def test_cached_views_match_the_projection_of_the_path() -> None:
    """The handle's cached path and views always equal path/model_view recomputed from the
    index, through appends of every kind, compactions, dangling calls and branches."""
    import random

    from durable_agent.ai import tool_result_message
    from durable_agent.session import Entry, model_view, path, raw_model_view, transcript_view
    from durable_agent.session.repair import dangling_calls

    rng = random.Random(20260102)
    agent = await new(None)
    open_calls: list[ToolCall] = []
    for step in range(400):
        op = rng.randrange(10)
        stored = [e for e in agent.entries() if not (isinstance(e, MessageEntry) and e.ephemeral)]
        if op == 0 and stored:
            await agent.branch(rng.choice([*(e.id for e in stored), ""]))
            open_calls = []
        elif op == 1:
            calls = [ToolCall(id=f"c{step}-{i}", name="t") for i in range(rng.randrange(1, 3))]
            open_calls = list(calls)
            await agent.append(
                MessageEntry(message=assistant_message(TextContent(text=f"a{step}"), *calls))
            )
        elif op in (2, 3) and open_calls:
            call = open_calls.pop(0)
            await agent.append(
                MessageEntry(
                    message=tool_result_message(call.id, "t", TextContent(text=f"r{step}"))
                )
            )
        elif op == 4:
            kept = rng.choice([*(e.id for e in stored[-4:]), "", "missing"])
            await agent.append(CompactionEntry(summary=f"summary {step}", first_kept_id=kept))
        elif op == 5:
            await agent.append(CustomEntry(kind="note"), ephemeral(f"eph {step}"))
        elif op == 6:
            await agent.append(meta(f"meta {step}"))
        else:
            batch: list[Any] = [f"u{step}"]
            if rng.random() < 0.5:
                batch.append(MessageEntry(message=assistant_message(TextContent(text="a"))))
            await agent.append(*batch)
        index = {e.id: e for e in agent.entries()}
        index = {
            k: v for k, v in index.items() if not (isinstance(v, MessageEntry) and v.ephemeral)
        }
        expected = path(index, agent.leaf_id)
        assert agent.state.path() == expected
        # at a leaf whose calls have stored results after it, the view shows them, each
        # chained from the one before, as a run from the leaf adopts them
        open_ids = {c.id for c in dangling_calls(raw_model_view(expected))}
        at, chain = agent.leaf_id or None, list[Entry]()
        for e in index.values():
            if (
                isinstance(e, MessageEntry)
                and e.parent_id == at
                and e.message.role == "tool_result"
                and e.message.tool_call_id in open_ids
            ):
                open_ids.discard(e.message.tool_call_id)
                at = e.id
                chain.append(e)
        assert agent.messages() == model_view([*expected, *chain])
        assert agent.state.views() == (raw_model_view(expected), model_view(expected))
        assert agent.transcript() == transcript_view(expected)
