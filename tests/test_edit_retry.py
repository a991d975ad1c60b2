"""``edit`` and ``retry`` on the handle, and the plain-text transcript tree
(docs/design.md#handle-and-engine, docs/design.md#tree-and-views).

Both are a ``branch`` then a ``run``: ``edit(text)`` replaces the last turn's question,
``retry()`` asks the last turn's input again. A **turn** starts at a user message that is
neither meta nor ephemeral; its input is that message and what the run stored with it before
the first assistant reply (a meta reminder, a custom entry).
"""

from __future__ import annotations

import pytest

from durable_agent import (
    EntryNotFoundError,
    InvalidRunInputError,
    MessageEntry,
    RunActiveError,
    ScriptedModel,
    meta,
)
from durable_agent.ai import Message
from durable_agent.session import Entry
from durable_agent.stores import MemoryStore
from tests.support.harness import Harness


def texts(items: list[Entry] | list[Message]) -> list[str]:
    out = []
    for item in items:
        message = item.message if isinstance(item, MessageEntry) else item
        assert isinstance(message, Message)
        out.append(message.text())
    return out


async def test_retry_answers_the_last_turn_again_on_a_sibling_branch(harness: Harness) -> None:
    store = MemoryStore()
    lm = ScriptedModel(["a1", "a2", "a2 again"])
    agent = await harness.open(lm, store=store)
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    first_q2 = agent.transcript()[2]

    produced = await (await agent.retry()).wait()

    assert texts(produced) == ["a2 again"]
    assert texts(agent.transcript()) == ["q1", "a1", "q2", "a2 again"]
    again = agent.transcript()[2]
    assert again.id != first_q2.id and again.parent_id == first_q2.parent_id
    assert len(await store.load_entries(agent.session_id)) == 6
    # the model saw exactly what it saw the first time
    assert texts(lm.requests[2].messages) == texts(lm.requests[1].messages) == ["q1", "a1", "q2"]


async def test_retry_asks_the_whole_input_of_the_turn_again(harness: Harness) -> None:
    """A meta reminder stored with the question is part of the turn's input."""
    lm = ScriptedModel(["a1", "a1 again"])
    agent = await harness.open(lm, store=MemoryStore())
    await (await agent.run("q1", meta("be brief"))).wait()
    await (await agent.retry()).wait()
    assert texts(lm.requests[1].messages) == ["q1", "be brief"]
    assert texts(agent.messages()) == ["q1", "be brief", "a1 again"]


async def test_edit_replaces_the_last_question(harness: Harness) -> None:
    lm = ScriptedModel(["a1", "a2", "a2 edited"])
    agent = await harness.open(lm, store=MemoryStore())
    await (await agent.run("q1")).wait()
    await (await agent.run("q2")).wait()
    await (await agent.edit("q2, better")).wait()
    assert texts(agent.transcript()) == ["q1", "a1", "q2, better", "a2 edited"]
    assert texts(lm.requests[2].messages) == ["q1", "a1", "q2, better"]


async def test_edit_of_the_first_question_starts_a_new_root(harness: Harness) -> None:
    lm = ScriptedModel(["a1", "b1"])
    agent = await harness.open(lm, store=MemoryStore())
    await (await agent.run("q1")).wait()
    await (await agent.edit("q1b")).wait()
    assert texts(agent.transcript()) == ["q1b", "b1"]
    assert agent.transcript()[0].parent_id is None


async def test_edit_and_retry_with_no_question_raise_and_store_nothing(harness: Harness) -> None:
    store = MemoryStore()
    agent = await harness.open(ScriptedModel(["never"]), store=store)
    with pytest.raises(EntryNotFoundError, match="no question"):
        await agent.retry()
    with pytest.raises(EntryNotFoundError, match="no question"):
        await agent.edit("x")
    await agent.append(meta("context only"))
    with pytest.raises(EntryNotFoundError):
        await agent.retry()
    assert len(await store.load_entries(agent.session_id)) == 1
    assert not agent.running


async def test_an_edit_refused_for_its_input_leaves_the_leaf_where_it_was(
    harness: Harness,
) -> None:
    """A refused edit raises before it branches: the handle stays on its answer, and the
    next run follows the conversation as before."""
    lm = ScriptedModel(["a1", "a2"])
    agent = await harness.open(lm, store=MemoryStore())
    await (await agent.run("q1")).wait()
    leaf = agent.leaf_id

    with pytest.raises(InvalidRunInputError):
        await agent.edit("   ")
    with pytest.raises(TypeError):
        await agent.edit(42)  # type: ignore[arg-type]

    assert agent.leaf_id == leaf
    await (await agent.run("q2")).wait()
    assert texts(agent.transcript()) == ["q1", "a1", "q2", "a2"]


async def test_a_retry_of_an_empty_stored_question_is_refused_where_it_stands(
    harness: Harness,
) -> None:
    """``append`` may store an empty message; retrying it is refused before the branch."""
    lm = ScriptedModel(["a1"])
    agent = await harness.open(lm, store=MemoryStore())
    await (await agent.run("q1")).wait()
    await agent.append("")
    leaf = agent.leaf_id

    with pytest.raises(InvalidRunInputError):
        await agent.retry()

    assert agent.leaf_id == leaf


async def test_retry_while_a_run_is_active_is_refused() -> None:
    from durable_agent import model, new

    lm = ScriptedModel(["a1", "a2"])
    agent = await new(model(lm), store=MemoryStore())
    await (await agent.run("q1")).wait()
    stream = await agent.run("q2")
    with pytest.raises(RunActiveError):
        await agent.retry()
    await stream.wait()


def test_render_tree_is_plain_text_marking_the_active_path() -> None:
    from durable_agent.ai import TextContent
    from durable_agent.session import render_tree, tree_lines

    def entry(id: str, parent: str | None, text: str, role: str = "user") -> MessageEntry:
        message = Message(role=role, content=[TextContent(text=text)])
        return MessageEntry(id=id, parent_id=parent, message=message)

    entries: list[Entry] = [
        entry("a", None, "q1"),
        entry("b", "a", "r1", "assistant"),
        entry("c", "b", "old"),
        entry("d", "b", "new"),
    ]
    text = render_tree(entries, "d", title="s")
    assert isinstance(text, str)
    assert text.splitlines() == [
        "s",
        "├── ● a user: q1",
        "└── ● b assistant: r1",
        "    ├── ⑂ branch 1/2",
        "    │   └── ○ c user: old",
        "    └── ⑂ branch 2/2 (active)",
        "        └── ● d user: new  ◀ leaf",
    ]
    lines = tree_lines(entries, "d")
    assert [(line.entry.id if line.entry else None, line.active) for line in lines] == [
        ("a", True),
        ("b", True),
        (None, False),
        ("c", False),
        (None, True),
        ("d", True),
    ]


async def test_the_tree_of_a_handle_shows_no_ephemeral_input(harness: Harness) -> None:
    """An ephemeral nudge is never stored: the tree drawn from the handle's entries is the one
    the store holds, with no branch of it (one nobody could switch to, gone after a reload)."""
    from durable_agent import ephemeral
    from durable_agent.session import render_tree

    store = MemoryStore()
    agent = await harness.open(["a1", "a2"], store=store)
    await (await agent.run("q1", ephemeral("be brief"))).wait()
    await (await agent.run("q2")).wait()
    drawn = render_tree(agent.entries(), agent.leaf_id)
    assert "branch" not in drawn and "be brief" not in drawn
    assert drawn == render_tree(await store.load_entries(agent.session_id), agent.leaf_id)
