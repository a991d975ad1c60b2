"""Run-start reconcile: a write that lands after its run failed becomes part of
the handle's path, and repair answers only calls with no stored result."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_agent import MessageEntry, PersistError, model, new
from durable_agent.ai import Reply, ScriptedModel, tool
from durable_agent.session import INTERRUPTED_TEXT, StoreUnavailableError
from durable_agent.session.tree import path as tree_path
from durable_agent.stores import FileStore, MemoryStore
from tests.support.late_store import LateStore, is_tool_result, is_user, results_for


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return text


@pytest.mark.parametrize("backend", ["file", "memory"])
async def test_a_tool_result_that_lands_after_the_run_failed_is_adopted_not_repaired(
    tmp_path: Path, backend: str
) -> None:
    inner = FileStore(tmp_path) if backend == "file" else MemoryStore()
    store = LateStore(inner)
    lm = ScriptedModel([Reply.call("echo", {"text": "ran"}, id="c1"), "after"])
    agent = await new(model(lm), store=store, tools=(echo,))
    store.hold_next(is_tool_result)
    with pytest.raises(PersistError):
        await (await agent.run("go")).wait()
    await store.land()  # the result the run gave up on is stored after all

    assert [m.text() for m in (await (await agent.run("carry on")).wait())] == ["after"]
    stored = await inner.load_entries(agent.session_id)
    answers = results_for(stored, "c1")
    assert len(answers) == 1 and answers[0].message.text() == "ran"
    assert INTERRUPTED_TEXT not in [m.text() for m in agent.messages()]
    on_path = [e.id for e in tree_path(stored, agent.leaf_id)]
    assert answers[0].id in on_path
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    # the model saw the real result, never an interrupted one
    assert [m.text() for m in lm.requests[-1].messages if m.role == "tool_result"] == ["ran"]
    reopened = await new(model(lm), store=inner, session_id=agent.session_id)
    assert reopened.leaf_id == agent.leaf_id


async def test_an_input_that_lands_after_the_run_failed_joins_the_path(tmp_path: Path) -> None:
    inner = FileStore(tmp_path)
    store = LateStore(inner)
    lm = ScriptedModel(["reply"])
    agent = await new(model(lm), store=store)
    store.hold_next(is_user)
    with pytest.raises(PersistError):
        await (await agent.run("first")).wait()
    await store.land()

    assert [m.text() for m in (await (await agent.run("second")).wait())] == ["reply"]
    stored = await inner.load_entries(agent.session_id)
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    path = tree_path(stored, agent.leaf_id)
    texts = [e.message.text() for e in path if isinstance(e, MessageEntry)]
    assert texts == ["first", "second", "reply"]  # one chain: "first" is not left a sibling


async def test_a_landed_result_is_adopted_only_from_the_handles_leaf() -> None:
    """Another handle's branch stays a sibling: reconcile follows stored answers to the leaf's
    dangling calls, not whatever else chains from the leaf."""
    store = MemoryStore()
    seed = await new(model(ScriptedModel(["seeded"])), store=store)
    await (await seed.run("seed")).wait()
    a = await new(model(ScriptedModel(["answer a"])), store=store, session_id=seed.session_id)
    b = await new(model(ScriptedModel(["answer b"])), store=store, session_id=seed.session_id)
    await (await a.run("question a")).wait()
    await (await b.run("question b")).wait()
    stored = await store.load_entries(seed.session_id)
    assert len(stored) == 6
    texts = [e.message.text() for e in tree_path(stored, b.leaf_id) if isinstance(e, MessageEntry)]
    assert texts == ["seed", "seeded", "question b", "answer b"]


async def test_an_append_that_lands_after_it_failed_joins_the_path() -> None:
    inner = MemoryStore()
    store = LateStore(inner)
    agent = await new(model(ScriptedModel(["reply"])), store=store)
    store.hold_next(is_user)
    with pytest.raises(StoreUnavailableError):
        await agent.append("noted")
    assert agent.entries() == []
    await store.land()

    await (await agent.run("go")).wait()
    stored = await inner.load_entries(agent.session_id)
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    texts = [
        e.message.text() for e in tree_path(stored, agent.leaf_id) if isinstance(e, MessageEntry)
    ]
    assert texts == ["noted", "go", "reply"]


async def test_at_a_leaf_between_a_call_and_its_stored_result_the_view_is_what_a_run_sends() -> (
    None
):
    """Branched to a reply whose call has a stored result after it, ``messages()`` shows that
    result, as a run from there sends the model (it adopts the result), not "interrupted"."""
    lm = ScriptedModel([Reply.call("echo", {"text": "ran"}, id="c1"), "done", "again"])
    agent = await new(model(lm), store=MemoryStore(), tools=(echo,))
    await (await agent.run("go")).wait()
    [call] = [e for e in agent.entries() if isinstance(e, MessageEntry) and e.message.tool_calls()]
    await agent.branch(call.id)
    shown = [m.text() for m in agent.messages() if m.role == "tool_result"]
    await (await agent.run("carry on")).wait()
    sent = [m.text() for m in lm.requests[-1].messages if m.role == "tool_result"]
    assert sent == ["ran"] and shown == sent
