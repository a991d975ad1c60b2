"""``branch`` and ``fork`` (docs/design.md#handle-and-engine), decisions 2, 4 and 8."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence

import pytest

from durable_agent import (
    AgentClosedError,
    CompactionEntry,
    CustomEntry,
    EntryNotFoundError,
    EntryTooLargeError,
    Event,
    InvalidSessionIdError,
    MessageEntry,
    SessionExistsError,
    SessionNotFoundError,
    ephemeral,
    model,
    new,
)
from durable_agent.ai import Message, ScriptedModel, user_message
from durable_agent.durable import fork_entry_id
from durable_agent.session import Entry, RetentionStore, SessionRecord, Store, encode_entry
from durable_agent.stores import FileStore, MemoryStore
from tests.support.gated_store import GatedStore, has_text
from tests.support.harness import Harness

HEX16 = re.compile(r"[0-9a-f]{16}")


class FailingAppends:
    """Delegates to a real store; fails the next ``fail_next`` appends."""

    def __init__(self, inner: RetentionStore) -> None:
        self.inner = inner
        self.fail_next = 0

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_session(self, session_id: str) -> SessionRecord:
        return await self.inner.load_session(session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise EntryTooLargeError(session_id, entries[0].id, 10, 5)
        await self.inner.append_entries(session_id, entries)


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


# -- branch -----------------------------------------------------------------------------------


async def test_branch_example(harness: Harness, store: Store) -> None:
    agent = await harness.open(["a1", "a2", "a3"], store=store, session_id="branch-ex")
    await (await agent.run("q1")).wait()
    saved = agent.leaf_id
    await (await agent.run("q2")).wait()
    await agent.branch(saved)
    assert agent.leaf_id == saved
    assert texts(agent.messages()) == ["q1", "a1"]
    await (await agent.run("q3")).wait()
    assert texts(agent.messages()) == ["q1", "a1", "q3", "a3"]
    assert len(agent.entries()) == 6
    stored = await store.load_entries("branch-ex")
    assert len(stored) == 6
    assert [e.parent_id for e in stored].count(saved) == 2  # q2 and q3 are siblings
    # reopening resumes at the last appended entry
    reopened = await harness.open([], store=store, session_id="branch-ex")
    assert reopened.leaf_id == stored[-1].id == agent.leaf_id


async def test_reopen_resumes_at_last_appended_not_at_branch(
    harness: Harness, store: Store
) -> None:
    agent = await harness.open(["a1", "a2"], store=store, session_id="branch-reopen")
    await (await agent.run("q1")).wait()
    first = agent.leaf_id
    await (await agent.run("q2")).wait()
    last = agent.leaf_id
    await agent.branch(first)
    reopened = await harness.open([], store=store, session_id="branch-reopen")
    assert reopened.leaf_id == last


async def test_branch_to_empty_leaf_starts_a_new_root(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(["a1", "fresh"])
    agent = await harness.open(lm, store=store, session_id="branch-root")
    await (await agent.run("q1")).wait()
    await agent.branch("")
    assert agent.leaf_id == "" and agent.messages() == [] and agent.transcript() == []
    await (await agent.run("again")).wait()
    assert texts(lm.requests[1].messages) == ["again"]  # empty history
    stored = await store.load_entries("branch-root")
    roots = [e for e in stored if e.parent_id is None]
    assert stored_texts(roots) == ["q1", "again"]
    assert texts(agent.messages()) == ["again", "fresh"]


@pytest.mark.parametrize("target", ["unknown", "ephemeral", "other-instance"])
async def test_branch_refuses_unknown_targets(target: str, store: Store) -> None:
    published: list[Event] = []
    agent = await new(None, store=store, session_id="branch-bad", publisher=published.append)
    await agent.append("one")
    if target == "unknown":
        entry_id = "0123456789abcdef"
    elif target == "ephemeral":
        (eph,) = await agent.append(ephemeral("gone"))
        entry_id = eph.id
    else:
        other = await new(None, store=store, session_id="branch-bad")
        (theirs,) = await other.append("theirs")
        entry_id = theirs.id
    leaf = agent.leaf_id
    published.clear()
    with pytest.raises(EntryNotFoundError) as info:
        await agent.branch(entry_id)
    assert isinstance(info.value, LookupError)
    assert agent.leaf_id == leaf
    assert published == []


async def test_branch_publishes_even_to_the_same_leaf(store: Store) -> None:
    published: list[Event] = []
    agent = await new(None, store=store, session_id="branch-pub", publisher=published.append)
    (first,) = await agent.append("one")
    (second,) = await agent.append("two")
    published.clear()
    await agent.branch(first.id)
    await agent.branch(first.id)
    await agent.branch("")
    assert [(e.type, e.from_id, e.leaf_id) for e in published] == [
        ("session_branched", second.id, first.id),
        ("session_branched", first.id, first.id),
        ("session_branched", first.id, ""),
    ]
    assert all(e.session_id == "branch-pub" for e in published)
    keys = [e.idempotency_key or "" for e in published]
    assert all(re.fullmatch(r"session_branched:branch-pub:[0-9a-f]{16}", k) for k in keys)
    assert len(set(keys)) == 3
    assert len(await store.load_entries("branch-pub")) == 2  # no copying


async def test_branch_then_append_grows_a_side_branch(store: Store) -> None:
    agent = await new(None, store=store, session_id="branch-append")
    (first,) = await agent.append("one")
    await agent.append("two")
    await agent.branch(first.id)
    (side,) = await agent.append("side")
    assert side.parent_id == first.id
    assert texts(agent.messages()) == ["one", "side"]


async def test_taking_in_another_processs_appends_keeps_the_branch_chosen(store: Store) -> None:
    """A handle takes in what other processes stored (``state.catch_up()``, which ``chat`` does
    before ``/tree``, ``/fork``...) and follows what they appended after its leaf. It followed
    what it knew already too: a branch chosen above the tip (an older entry, or the root to
    start anew) went back to the tip at the next ``/tree``, and ``/fork`` copied the old path."""
    agent = await new(None, store=store, session_id="branch-kept")
    (first,) = await agent.append("one")
    (second,) = await agent.append("two")
    for chosen in (first.id, ""):
        await agent.branch(chosen)
        await agent.state.catch_up()
        assert agent.leaf_id == chosen
    other = await new(None, store=store, session_id="branch-kept")  # at the tip, "two"
    (third,) = await other.append("three")
    await agent.state.catch_up()
    assert agent.leaf_id == "", "three goes on from two: a branch this handle left"
    await agent.branch(third.id)
    (fourth,) = await other.append("four")
    await agent.state.catch_up()
    assert agent.leaf_id == fourth.id, "appended after the leaf: taken in and followed"
    assert second.parent_id == first.id


# -- fork -------------------------------------------------------------------------------------


def test_fork_entry_id_formula() -> None:
    expected = hashlib.sha256(b"child\n0123456789abcdef").hexdigest()[:16]
    assert fork_entry_id("child", "0123456789abcdef") == expected


async def test_fork_copies_the_active_path(harness: Harness, store: RetentionStore) -> None:
    source = await harness.open(["a1", "a2", "a3", "a4"], store=store, session_id="fork-src")
    await (await source.run("q1")).wait()
    saved = source.leaf_id
    await (await source.run("abandoned")).wait()
    await source.branch(saved)
    await source.append(ephemeral("not copied"))
    await (await source.run("q3")).wait()
    path_before = await store.load_entries("fork-src")
    src_view = source.messages()

    child = await source.fork("fork-child")
    assert child.session_id == "fork-child"
    record = await store.load_session("fork-child")
    assert record.parent_id == "fork-src"

    copies = await store.load_entries("fork-child")
    active = [e for e in path_before if e.id in {x.id for x in source.transcript()}]
    assert len(copies) == 4 == len(active)
    parent = None
    for copy, original in zip(copies, active, strict=True):
        assert copy.id == fork_entry_id("fork-child", original.id)
        assert copy.parent_id == parent
        assert copy.created_at == original.created_at
        assert copy.model_copy(update={"id": original.id, "parent_id": original.parent_id}) == (
            original
        )
        parent = copy.id
    assert child.messages() == src_view
    assert child.leaf_id == copies[-1].id
    assert [e.id for e in child.entries()] == [e.id for e in copies]
    assert "abandoned" not in stored_texts(copies) and "not copied" not in stored_texts(copies)
    # the source never changes
    assert await store.load_entries("fork-src") == path_before
    assert source.leaf_id == path_before[-1].id

    # the child runs on its own, with the same factory and options
    await (await child.run("child question")).wait()
    assert texts(child.messages()) == ["q1", "a1", "q3", "a3", "child question", "a4"]
    assert texts(source.messages()) == ["q1", "a1", "q3", "a3"]


async def test_fork_remaps_first_kept_id(harness: Harness, store: Store) -> None:
    source = await harness.open(
        ["a1", "a2", "summary of q1"], store=store, session_id="fork-compact"
    )
    await (await source.run("q1")).wait()
    await (await source.run("q2")).wait()
    compaction = await source.compact(keep_turns=1)
    assert compaction is not None and compaction.first_kept_id
    child = await source.fork("fork-compact-child")
    copies = await store.load_entries("fork-compact-child")
    copied = copies[-1]
    assert isinstance(copied, CompactionEntry)
    assert copied.first_kept_id == fork_entry_id("fork-compact-child", compaction.first_kept_id)
    assert copied.first_kept_id in {e.id for e in copies}
    assert child.messages() == source.messages()
    assert texts(child.messages()) == ["summary of q1", "q2", "a2"]


async def test_fork_generates_an_id_and_validates_a_given_one(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-ids")
    await source.append("x")
    child = await source.fork()
    assert HEX16.fullmatch(child.session_id)
    with pytest.raises(InvalidSessionIdError):
        await source.fork("../escape")


async def test_fork_of_an_empty_session(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-empty")
    child = await source.fork("fork-empty-child")
    assert child.leaf_id == "" and child.entries() == []
    assert await store.load_entries("fork-empty-child") == []


async def test_fork_publishes_forked_then_init(store: Store) -> None:
    published: list[Event] = []
    source = await new(None, store=store, session_id="fork-pub", publisher=published.append)
    await source.append("x", CustomEntry(kind="note"))
    published.clear()
    child = await source.fork("fork-pub-child")
    assert [e.type for e in published] == ["session_forked", "session_init"]
    forked, init = published
    assert (forked.session_id, forked.parent_id) == ("fork-pub-child", "fork-pub")
    assert forked.idempotency_key == "session_forked:fork-pub-child:fork-pub"
    assert (init.session_id, init.leaf_id) == ("fork-pub-child", child.leaf_id)
    assert init.idempotency_key == "session_init:fork-pub-child:fork"
    # a retried fork is the same occurrence; one that goes on to a longer path is another
    published.clear()
    await source.fork("fork-pub-child")
    assert [e.idempotency_key for e in published] == [forked.idempotency_key, init.idempotency_key]
    await source.append("y")
    published.clear()
    longer = await source.fork("fork-pub-child")
    assert published[1].leaf_id == longer.leaf_id != child.leaf_id
    occurrence = str(published[0].idempotency_key).removeprefix(f"{forked.idempotency_key}:")
    assert HEX16.fullmatch(occurrence)
    assert published[1].idempotency_key == f"{init.idempotency_key}:{occurrence}"


async def test_failed_fork_publishes_nothing_and_resumes(store: RetentionStore) -> None:
    wrapped = FailingAppends(store)
    published: list[Event] = []
    source = await new(None, store=wrapped, session_id="fork-fail", publisher=published.append)
    await source.append("one", "two")
    published.clear()
    wrapped.fail_next = 1
    with pytest.raises(EntryTooLargeError):
        await source.fork("fork-fail-child")
    assert published == []
    assert await store.load_entries("fork-fail-child") == []  # created, nothing copied
    child = await source.fork("fork-fail-child")  # the same fork completes
    assert stored_texts(await store.load_entries("fork-fail-child")) == ["one", "two"]
    assert child.messages() == source.messages()
    assert [e.type for e in published] == ["session_forked", "session_init"]


async def test_fork_resumes_after_a_partial_copy(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-partial")
    await source.append("one", "two", "three")
    first = await store.load_entries("fork-partial")
    await store.create_session("fork-partial-child", parent_id="fork-partial")
    copy0 = first[0].model_copy(update={"id": fork_entry_id("fork-partial-child", first[0].id)})
    await store.append_entries("fork-partial-child", [copy0])
    child = await source.fork("fork-partial-child")
    stored = await store.load_entries("fork-partial-child")
    assert stored_texts(stored) == ["one", "two", "three"]
    assert [encode_entry(e) for e in child.entries()] == [encode_entry(e) for e in stored]


def another_store_object(store: RetentionStore) -> RetentionStore:
    """A second store object on the same data, as a second server process would hold."""
    if isinstance(store, FileStore):
        return FileStore(store.root)
    if isinstance(store, MemoryStore):
        return store
    from durable_agent.stores.mongo import MongoStore

    assert isinstance(store, MongoStore)
    return MongoStore(store.database)


async def test_two_forks_of_different_leaves_into_one_child_at_once(store: RetentionStore) -> None:
    """Both forks find the child holding a prefix of their copies (empty) before either copies:
    the first to copy wins, the other is refused (nothing of its path stored), so the child
    holds one path, as when the two run one after the other (docs/design.md#tree-and-views)."""
    gated = GatedStore(store)
    first = await new(None, store=gated, session_id="race-src")
    await first.append("one", "two")
    second = await new(None, store=another_store_object(store), session_id="race-src")
    await second.branch(first.entries()[0].id)
    await second.append("other")
    gated.arm(has_text("two"), before=True)  # the first fork's copy, after its check
    held = asyncio.ensure_future(first.fork("race-child"))
    await gated.entered.wait()
    winner = await second.fork("race-child")
    await gated.let_go()
    with pytest.raises(SessionExistsError, match="race-child"):
        await held
    stored = await store.load_entries("race-child")
    assert stored_texts(stored) == ["one", "other"]
    assert [encode_entry(e) for e in stored] == [encode_entry(e) for e in winner.entries()]


async def test_fork_refuses_a_child_with_another_parent(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-other")
    await source.append("x")
    await store.create_session("taken")  # no parent
    with pytest.raises(SessionExistsError):
        await source.fork("taken")
    await store.create_session("taken-2", parent_id="somewhere-else")
    with pytest.raises(SessionExistsError):
        await source.fork("taken-2")
    assert await store.load_entries("taken") == []


async def test_fork_refuses_a_child_that_ran_since(harness: Harness, store: Store) -> None:
    source = await harness.open(["a1", "child answer"], store=store, session_id="fork-ran")
    await (await source.run("q1")).wait()
    child = await source.fork("fork-ran-child")
    before = await store.load_entries("fork-ran-child")
    await (await child.run("child q")).wait()
    assert len(await store.load_entries("fork-ran-child")) == 4
    with pytest.raises(SessionExistsError):
        await source.fork("fork-ran-child")
    # a re-run of the same fork before the child diverged is fine
    assert before and before[-1].id == fork_entry_id("fork-ran-child", source.leaf_id)


async def test_refork_of_a_completed_fork_resumes(store: Store) -> None:
    source = await new(None, store=store, session_id="refork")
    await source.append("one")
    first = await source.fork("refork-child")
    second = await source.fork("refork-child")
    assert second.entries() == first.entries()
    assert len(await store.load_entries("refork-child")) == 1


async def test_fork_refuses_a_diverged_prefix(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-div")
    await source.append("one")
    await store.create_session("fork-div-child", parent_id="fork-div")
    await store.append_entries(
        "fork-div-child", [MessageEntry(id="zzz", message=user_message("other"))]
    )
    with pytest.raises(SessionExistsError):
        await source.fork("fork-div-child")


async def test_fork_children_inherit_factory_options_and_publisher() -> None:
    published: list[Event] = []
    lm = ScriptedModel(["a1", "child reply"])
    store = MemoryStore()
    source = await new(model(lm), store=store, publisher=published.append, system_prompt="be kind")
    await (await source.run("q1")).wait()
    child = await source.fork("inherit-child")
    published.clear()
    await (await child.run("q2")).wait()
    assert lm.requests[-1].system_prompt == "be kind"
    assert texts(lm.requests[-1].messages) == ["q1", "a1", "q2"]
    await child.branch("")
    assert [(e.type, e.session_id) for e in published] == [("session_branched", "inherit-child")]
    grandchild = await child.fork("inherit-grandchild")
    assert grandchild.store is store


async def test_fork_while_closed(store: Store) -> None:
    source = await new(None, store=store, session_id="fork-closed")
    await source.close()
    with pytest.raises(AgentClosedError):
        await source.fork("fork-closed-child")
    with pytest.raises(SessionNotFoundError):  # nothing was created
        await store.load_entries("fork-closed-child")


async def test_a_fork_names_a_parent_the_store_holds(
    harness: Harness, store: RetentionStore
) -> None:
    """A handle on a session nothing was stored in yet (on Temporal its first run or write
    creates it) forks into a child whose parent exists, as in process; one whose session was
    deleted since is refused, nothing created (the child named a parent no store held)."""
    agent = await harness.open([], store=store, session_id="fork-unborn")
    child = await agent.fork("fork-unborn-child")
    assert (await store.load_session(child.session_id)).parent_id == "fork-unborn"
    assert await store.load_entries("fork-unborn") == []
    await store.delete_session("fork-unborn")
    with pytest.raises(SessionNotFoundError):
        await agent.fork("fork-unborn-child-2")
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("fork-unborn-child-2")
