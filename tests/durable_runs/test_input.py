"""Run inputs (docs/design.md#handle-and-engine): ephemeral, meta, custom and compaction inputs,
hook follow-ups."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pytest

from durable_agent import (
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    ephemeral,
    meta,
    model,
    new,
    text,
)
from durable_agent.agent import Hooks
from durable_agent.ai import (
    Message,
    ScriptedModel,
    user_message,
)
from durable_agent.durable.errors import InvalidRunInputError
from durable_agent.session import Entry, SessionNotFoundError, Store
from tests.durable_runs.support import (
    assert_chain,
    collect,
    stored_texts,
    texts,
)
from tests.support.harness import Harness

# -- inputs -------------------------------------------------------------------------------------


async def test_ephemeral_only_input_nudge(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["ok", "nudged reply"])
    agent = await harness.open(lm, store=store, session_id="nudge")
    await (await agent.run("hi")).wait()
    old_leaf = agent.leaf_id
    events = await collect(await agent.run(ephemeral("nudge")))
    assert texts(lm.requests[1].messages) == ["hi", "ok", "nudge"]
    assert events[0].entries == []
    stored = await store.load_entries("nudge")
    assert stored_texts(stored) == ["hi", "ok", "nudged reply"]
    assert stored[-1].parent_id == old_leaf
    assert agent.leaf_id == stored[-1].id
    assert texts(agent.messages()) == ["hi", "ok", "nudged reply"]


async def test_ephemeral_nudge_log_in_process() -> None:
    agent = await new(model(ScriptedModel(["ok", "nudged reply"])))
    await (await agent.run("hi")).wait()
    old_leaf = agent.leaf_id
    await (await agent.run(ephemeral("nudge"))).wait()
    nudge, reply = agent.entries()[-2:]
    assert isinstance(nudge, MessageEntry) and nudge.ephemeral
    assert nudge.parent_id == old_leaf and reply.parent_id == old_leaf
    assert len(await agent.store.load_entries(agent.session_id)) == 3


async def test_mixed_input_order_and_chaining(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["reply"])
    agent = await harness.open(lm, store=store, session_id="mixed")
    events = await collect(await agent.run(text("A"), ephemeral("Eph"), text("B")))
    assert texts(lm.requests[0].messages) == ["A", "Eph", "B"]
    receipt = events[0].entries
    assert receipt is not None and stored_texts(receipt) == ["A", "B"]
    a, b = receipt
    assert a.parent_id is None and b.parent_id == a.id
    stored = await store.load_entries("mixed")
    assert stored_texts(stored) == ["A", "B", "reply"]
    assert stored[2].parent_id == b.id


async def test_meta_input_is_stored_and_sent_but_hidden(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["answer"])
    agent = await harness.open(lm, store=store, session_id="meta-in")
    events = await collect(await agent.run(meta("the user is on mobile"), "question"))
    assert texts(lm.requests[0].messages) == ["the user is on mobile", "question"]
    assert events[0].entries is not None and len(events[0].entries) == 2
    stored = await store.load_entries("meta-in")
    assert isinstance(stored[0], MessageEntry) and stored[0].meta
    transcript = [e for e in agent.transcript() if isinstance(e, MessageEntry)]
    assert stored_texts(transcript) == ["question", "answer"]


async def test_custom_and_compaction_inputs_are_stored_never_sent(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel(["first", "second"])
    agent = await harness.open(lm, store=store, session_id="custom-in")
    await (await agent.run("q1")).wait()
    note = CustomEntry(kind="ui_state")
    summary = CompactionEntry(summary="earlier: q1/first")
    events = await collect(await agent.run(note, summary, "q2"))
    assert texts(lm.requests[1].messages) == ["q1", "first", "q2"]
    receipt = events[0].entries
    assert receipt is not None
    assert [type(e).__name__ for e in receipt] == ["CustomEntry", "CompactionEntry", "MessageEntry"]
    stored = await store.load_entries("custom-in")
    assert len(stored) == 6
    assert_chain(stored)
    # the stored compaction applies to later views
    assert texts(agent.messages()) == ["earlier: q1/first", "q2", "second"]


async def test_run_without_input_continues_from_history(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["continued"])
    agent = await harness.open(lm, store=store, session_id="no-input")
    await agent.append("pending question")
    messages = await (await agent.run()).wait()
    assert texts(messages) == ["continued"]
    assert texts(lm.requests[0].messages) == ["pending question"]


async def test_hook_follow_ups_are_stored_and_returned() -> None:
    asked = False

    def follow_up(produced: Sequence[Message]) -> list[Message] | None:
        nonlocal asked
        if asked:
            return None
        asked = True
        return [user_message("are you sure?")]

    agent = await new(model(ScriptedModel(["yes", "certain"])), hooks=Hooks(follow_up=follow_up))
    stream = await agent.run("q")
    events = await collect(stream)
    receipts = [e for e in events if e.agent is not None and e.agent.type == "message_end"]
    assert len(receipts) == 3
    assert texts(await stream.wait()) == ["yes", "are you sure?", "certain"]
    stored = await agent.store.load_entries(agent.session_id)
    assert stored_texts(stored) == ["q", "yes", "are you sure?", "certain"]
    assert_chain(stored)
    turn_starts = [e for e in events if e.agent is not None and e.agent.type == "turn_start"]
    assert turn_starts[1].agent is not None and turn_starts[1].agent.input is not None


def test_text_input_helper_matches_str() -> None:
    assert text("x").message.text() == "x"


# -- empty runs ---------------------------------------------------------------------------------


async def test_empty_runs_fail_naming_the_field_before_anything_is_stored(
    harness: Harness, store: Store
) -> None:
    """An empty message, or no input where there is nothing to answer, is refused with
    InvalidRunInputError naming the input, on both executors, and nothing is stored."""
    lm = ScriptedModel(["never"])
    agent = await harness.open(lm, store=store, session_id="empty")
    without_content = MessageEntry(message=Message(role="user", content=[]))
    for args, field in [
        ((), "inputs"),
        (("",), "inputs[0].content"),
        (("hi", without_content), "inputs[1].content"),
        ((text("  "),), "inputs[0].content"),
    ]:
        with pytest.raises(InvalidRunInputError) as info:
            await agent.run(*args)
        assert info.value.field == field, args
        assert f"invalid run input: {field}: " in str(info.value)
    assert lm.requests == []
    assert not agent.running
    stored = await _stored_or_none(store, "empty")
    assert stored in (None, [])
    # the handle still runs
    assert texts(await (await agent.run("hi")).wait()) == ["never"]


async def _stored_or_none(store: Store, session_id: str) -> list[Entry] | None:
    try:
        return await store.load_entries(session_id)
    except SessionNotFoundError:
        return None


@pytest.mark.parametrize("run_id", ["order.42", "a/b", "", "x" * 65])
async def test_a_run_id_a_worker_would_refuse_is_refused_at_the_call(
    harness: Harness, store: Store, run_id: str
) -> None:
    """A run's ID is part of its workflow ID: a worker refuses one outside 1-64 characters of
    ASCII letters, digits, - and _ (an operator's typo), so both executors refuse it at
    ``run()``, before anything is stored, rather than the run failing on Temporal alone."""
    lm = ScriptedModel(["never"])
    agent = await harness.open(lm, store=store)
    sid = agent.session_id
    with pytest.raises(InvalidRunInputError, match="run ID"):
        await agent.run("hi", run_id=run_id)
    assert lm.requests == [] and not agent.running
    with contextlib.suppress(SessionNotFoundError):  # a Temporal handle makes none before
        assert await store.load_entries(sid) == []
    assert texts(await (await agent.run("hi", run_id="fine-id_1")).wait()) == ["never"]
