"""Retention (issue 15.12): ``list_sessions`` and ``delete_session`` on every concrete store.

Like the conformance suite, everything goes through the ``store`` fixture, so each store kind in
``STORE_KINDS`` (memory, file, mongo) meets the same contract
(:class:`durable_agent.session.RetentionStore`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durable_agent import new
from durable_agent.ai import Message, TextContent
from durable_agent.durable.errors import AgentError
from durable_agent.session import (
    InvalidSessionIdError,
    MessageEntry,
    RetentionStore,
    SessionNotFoundError,
    SessionRecord,
    Store,
)
from durable_agent.session.deltas import Delta, DeltaKey, LiveStore
from durable_agent.stores import FileStore, MemoryStore, RememberingStore
from tests.support.harness import Harness

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def retention(store: Store) -> RetentionStore:
    assert isinstance(store, RetentionStore), f"{type(store).__name__} lists and deletes"
    return store


def entry(entry_id: str, parent: str | None = None) -> MessageEntry:
    return MessageEntry(
        id=entry_id,
        parent_id=parent,
        created_at=T0,
        message=Message(role="user", content=[TextContent(text=f"text of {entry_id}")]),
    )


async def create_in_order(store: RetentionStore, ids: list[str]) -> list[SessionRecord]:
    """Create the sessions one after another, each at a later millisecond than the one before
    (a BSON date has millisecond precision), by waiting for the clock, not for a fixed time."""
    records: list[SessionRecord] = []
    for sid in ids:
        if records:
            while datetime.now(UTC) < records[-1].created_at + timedelta(milliseconds=2):
                pass
        records.append(await store.create_session(sid))
    return records


async def test_empty_store_lists_nothing(store: Store) -> None:
    assert await retention(store).list_sessions() == []


async def test_list_is_newest_first_and_paged(store: Store) -> None:
    s = retention(store)
    records = await create_in_order(s, ["s0", "s1", "s2", "s3", "s4"])
    await s.append_entries("s2", [entry("a"), entry("b", "a")])
    newest = list(reversed(records))
    assert await s.list_sessions() == newest
    assert await s.list_sessions(limit=2) == newest[:2]
    assert await s.list_sessions(limit=2, offset=2) == newest[2:4]
    assert await s.list_sessions(limit=2, offset=4) == newest[4:]
    assert await s.list_sessions(offset=5) == []
    assert await s.list_sessions(limit=1) == [await s.load_session("s4")]


async def test_list_carries_the_fork_source(store: Store) -> None:
    s = retention(store)
    await create_in_order(s, ["root-1"])
    await s.create_session("fork-1", parent_id="root-1")
    listed = {r.id: r.parent_id for r in await s.list_sessions()}
    assert listed == {"root-1": None, "fork-1": "root-1"}


@pytest.mark.parametrize(("limit", "offset"), [(0, 0), (-1, 0), (10, -1), (True, 0)])
async def test_bad_pages_are_value_errors(store: Store, limit: int, offset: int) -> None:
    with pytest.raises(ValueError, match=r"limit|offset"):
        await retention(store).list_sessions(limit=limit, offset=offset)


async def test_a_prefix_lists_only_its_sessions_in_order_and_pages(store: Store) -> None:
    s = retention(store)
    ids = ["acme:1", "bolt:1", "acme:2", "acme", "acmE:3", "acme.x", "acme:3", "xacme:4"]
    records = {r.id: r for r in await create_in_order(s, ids)}
    newest = [records[sid] for sid in ["acme:3", "acme:2", "acme:1"]]
    assert await s.list_sessions(prefix="acme:") == newest
    assert await s.list_sessions(prefix="acme:", limit=2) == newest[:2]
    assert await s.list_sessions(prefix="acme:", limit=2, offset=2) == newest[2:]
    assert await s.list_sessions(prefix="acme:", offset=3) == []
    assert [r.id for r in await s.list_sessions(prefix="acme.")] == ["acme.x"]  # "." is no wildcard
    assert [r.id for r in await s.list_sessions(prefix="acme:3")] == ["acme:3"]
    assert await s.list_sessions(prefix="none:") == []
    assert len(await s.list_sessions(prefix="")) == len(ids)


@pytest.mark.parametrize("prefix", [".*", "a/b", "^a", "a b", "x" * 201, "..", 7])
async def test_a_prefix_no_session_id_could_start_with_is_refused(
    store: Store, prefix: str
) -> None:
    await store.create_session("s1")
    with pytest.raises(InvalidSessionIdError):
        await retention(store).list_sessions(prefix=prefix)


async def test_delete_removes_entries_and_record(store: Store) -> None:
    s = retention(store)
    await create_in_order(s, ["keep", "gone"])
    await s.append_entries("gone", [entry("a"), entry("b", "a")])
    await s.append_entries("keep", [entry("k")])
    await s.create_session("child", parent_id="gone")

    await s.delete_session("gone")

    with pytest.raises(SessionNotFoundError):
        await s.load_entries("gone")
    with pytest.raises(SessionNotFoundError):
        await s.load_session("gone")
    assert {r.id for r in await s.list_sessions()} == {"keep", "child"}
    assert [e.id for e in await s.load_entries("keep")] == ["k"]
    assert (await s.load_session("child")).parent_id == "gone", "forks keep their parent_id"
    with pytest.raises(SessionNotFoundError):
        await s.delete_session("gone")


async def test_a_deleted_session_takes_no_appends_and_comes_back_empty(store: Store) -> None:
    s = retention(store)
    await s.create_session("s1")
    await s.append_entries("s1", [entry("a")])
    await s.delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await s.append_entries("s1", [entry("b", "a")])
    await s.create_session("s1")
    assert await s.load_entries("s1") == [], "the old entries do not come back"
    await s.append_entries("s1", [entry("a")])
    assert [e.id for e in await s.load_entries("s1")] == ["a"]


async def test_delete_of_an_unknown_or_invalid_id(store: Store) -> None:
    s = retention(store)
    with pytest.raises(SessionNotFoundError):
        await s.delete_session("never-was")
    with pytest.raises(InvalidSessionIdError):
        await s.delete_session("../escape")


async def test_a_deleted_sessions_run_fails_with_a_typed_error(
    harness: Harness, store: Store
) -> None:
    """An agent handle still open on a deleted session cannot write its next run anywhere: the
    run fails with an ``AgentError`` (``PersistError`` in process) naming the missing session,
    on every executor."""
    s = retention(store)
    agent = await harness.open(["one", "two"], store=s, session_id="doomed")
    await (await agent.run("first")).wait()
    await s.delete_session("doomed")
    with pytest.raises(AgentError, match=r"session .doomed. not found"):
        await (await agent.run("second")).wait()
    with pytest.raises(SessionNotFoundError):
        await s.load_entries("doomed")


async def test_a_fork_from_a_handle_on_a_deleted_session_brings_nothing_back(store: Store) -> None:
    """A handle still open on a deleted session holds its entries in memory: forking it copies
    none of them into a new session, also once the session was created again under its ID."""
    s = retention(store)
    agent = await new(None, store=s, session_id="forked-gone")
    await agent.append("private one", "private two")
    await s.delete_session("forked-gone")
    with pytest.raises(SessionNotFoundError):
        await agent.fork("copy-1")
    await s.create_session("forked-gone")
    with pytest.raises(SessionNotFoundError):
        await agent.fork("copy-2")
    for sid in ("copy-1", "copy-2"):
        with pytest.raises(SessionNotFoundError):
            await s.load_entries(sid)
    assert await s.load_entries("forked-gone") == []


async def test_file_listing_reads_headers_only(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged entry line does not stop the listing (records only), while a load reports it.
    A file named as a session whose header is damaged is left out, and the warning names it:
    an operator must find it to repair or remove it."""
    from pathlib import Path

    root = Path(str(tmp_path)) / "sessions"
    s = FileStore(root, fsync=False)
    await s.create_session("s1")
    await s.append_entries("s1", [entry("a")])
    with (root / "s1.jsonl").open("a") as f:
        f.write("{not json}\n")
    (root / "notes.jsonl").write_text("not a session\n")
    (root / "bad id.jsonl").write_text("")
    assert [r.id for r in await s.list_sessions()] == ["s1"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1, warned
    assert warned[0].startswith("not listed: session 'notes': decode session")
    assert warned[0].endswith(f" in {(root / 'notes.jsonl').absolute()}")


# --- deleted means deleted, across store objects (docs/design.md#retention) ---------------------


def twin(store: Store) -> RetentionStore:
    """Another store object on the same backend (a MemoryStore is its own backend: itself; a
    worker's remembering wrapper gets one of its own, as another worker would)."""
    if isinstance(store, RememberingStore):
        return RememberingStore(twin(store.store))
    if isinstance(store, FileStore):
        return FileStore(store.root)
    if isinstance(store, MemoryStore):
        return store
    from durable_agent.stores.mongo import MongoStore

    assert isinstance(store, MongoStore)
    return MongoStore(store.database)


async def test_an_append_after_a_delete_through_another_object_is_refused(store: Store) -> None:
    s, other = retention(store), twin(store)
    await s.create_session("s1")
    await s.append_entries("s1", [entry("a")])
    await other.delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await s.append_entries("s1", [entry("b", "a")])
    await other.create_session("s1")
    assert await s.load_entries("s1") == []


async def test_a_writer_of_a_deleted_session_adds_nothing_to_the_one_created_again(
    store: Store,
) -> None:
    """A run that loaded the session before it was deleted and created again under its ID,
    through this store object or another, fails at its next append (its parent is not in the
    new session) and writes nothing there."""
    for deleter in (retention(store), twin(store)):
        s = retention(store)
        await s.create_session("s1")
        await s.append_entries("s1", [entry("a")])
        await deleter.delete_session("s1")
        await deleter.create_session("s1")
        with pytest.raises(SessionNotFoundError):
            await s.append_entries("s1", [entry("b", "a"), entry("c", "b")])
        for reader in (s, deleter, twin(store)):
            assert await reader.load_entries("s1") == []
        await deleter.delete_session("s1")


async def test_appends_keep_their_order_after_another_object_deletes_and_creates(
    store: Store,
) -> None:
    """Store objects that knew the deleted session (its end, its IDs) append to the session
    created again under its ID: loads give the append order, and an ID the old session held is
    stored anew."""
    s, other = retention(store), twin(store)
    await s.create_session("s1")
    await s.append_entries("s1", [entry(f"old{i}") for i in range(4)])
    await other.delete_session("s1")
    await other.create_session("s1")
    await other.append_entries("s1", [entry("n1")])
    await s.append_entries("s1", [entry("n2", "n1")])
    await other.append_entries("s1", [entry("n3", "n2")])
    await s.append_entries("s1", [entry("old0")])
    expected = ["n1", "n2", "n3", "old0"]
    for reader in (s, other, twin(store)):
        assert [e.id for e in await reader.load_entries("s1")] == expected


async def test_a_delete_removes_the_sessions_live_deltas(store: Store) -> None:
    """A reply's deltas go with its session, whichever store object deletes it; another
    session's stay."""
    s = retention(store)
    assert isinstance(s, LiveStore)
    keys = [DeltaKey("s1", "run", 3), DeltaKey("s10", "run", 3)]
    for key in keys:
        await s.create_session(key.session_id)
        await s.live_deltas().publish(key, Delta(attempt=1, seq=1, size=0))
    other = twin(store)
    assert isinstance(other, LiveStore)
    await other.delete_session("s1")
    for channel in (s.live_deltas(), other.live_deltas()):
        assert await channel.read(keys[0]) == []
        assert [d.seq for d in await channel.read(keys[1])] == [1]
    if isinstance(store, FileStore):
        assert not (store.root / "s1.live").exists()


async def test_a_reply_streaming_after_its_session_was_deleted_writes_nothing(
    store: Store,
) -> None:
    """A run still streaming a reply when another process deletes its session (``sessions rm``
    without ``--workflows``) writes its next delta through its own store object: the channel
    refuses it with ``SessionNotFoundError`` (its writer stops) and keeps none of it, so the
    deleted conversation's text is not back on disk or in the database until the reply ends.
    A cancel note (turn 0, no text) still goes in: it is what stops the deleted session's calls
    (docs/design.md#retention)."""
    s = retention(store)
    assert isinstance(s, LiveStore)
    key = DeltaKey("s1", "run", 1)
    await s.create_session("s1")
    channel = s.live_deltas()
    await channel.publish(key, Delta(attempt=1, seq=1, size=0))
    await twin(store).delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await channel.publish(key, Delta(attempt=1, seq=2, ops=[(0, "=", {"type": "x"})]))
    with pytest.raises(SessionNotFoundError):  # a reply that starts after the delete, too
        await channel.publish(DeltaKey("s1", "run", 2), Delta(attempt=1, seq=1, size=0))
    assert await channel.read(key) == []
    assert await channel.read(DeltaKey("s1", "run", 2)) == []
    if isinstance(store, FileStore):
        assert not (store.root / "s1.live").exists()
    note = DeltaKey("s1", "run", 0)
    await channel.publish(note, Delta(attempt=0, seq=1, head={"cancelled": True}))
    assert [d.seq for d in await channel.read(note)] == [1]
