"""MongoStore specifics (SPEC §2.3) against a real server: FerretDB started by the tests, or
``$MONGODB_URI``.

The behaviour every store shares is in the conformance suite (the ``store`` fixture includes
``mongo``); this file checks what only MongoStore has: the document shapes and unique indexes,
Motor support, concurrent writers, the duplicate-key race, "validated before any query", the size
limit, cancellation of a started write, and a server that goes away mid-test and comes back.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson.raw_bson import RawBSONDocument
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, DuplicateKeyError

from durable_agent.ai import Message, TextContent
from durable_agent.session import (
    CorruptSessionError,
    CustomEntry,
    Entry,
    EntryConflictError,
    EntryTooLargeError,
    InvalidSessionIdError,
    MessageEntry,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
    decode_entry,
    encode_entry,
)
from durable_agent.stores.mongo import DEFAULT_MAX_ENTRY_BYTES, MongoStore
from tests.support.ferretdb import FerretDB, FerretDBUnavailable, start_ferretdb
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS, new_database_name

pytestmark = pytest.mark.mongo

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def entry(eid: str, text: str | None = None, parent: str | None = None) -> MessageEntry:
    """A message entry with fixed content, so re-creating it gives an identical encoding."""
    message = Message(role="user", content=[TextContent(text=text or eid)], timestamp=T0)
    return MessageEntry(id=eid, parent_id=parent, created_at=T0, message=message)


def ids(entries: Sequence[Entry]) -> list[str]:
    return [e.id for e in entries]


class Commands(monitoring.CommandListener):
    """Every command a client sends (name and body), with events tests can wait on."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.waiters: dict[tuple[str, str], asyncio.Event] = {}

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def wait_for(self, phase: str, command: str) -> asyncio.Event:
        """An event set when ``command`` reaches ``phase`` ("started" or "succeeded")."""
        return self.waiters.setdefault((phase, command), asyncio.Event())

    def _fire(self, phase: str, command: str) -> None:
        waiter = self.waiters.get((phase, command))
        if waiter is not None:
            waiter.set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.log.append((event.command_name, dict(event.command)))
        self._fire("started", event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._fire("succeeded", event.command_name)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._fire("failed", event.command_name)


class InsertsCounted(monitoring.CommandListener):
    """Sets ``done`` once ``wanted`` inserts succeeded since ``count`` was last reset."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.count = 0
        self.done = asyncio.Event()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "insert":
            self.count += 1
            if self.count >= self.wanted:
                self.done.set()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def client_factory(
    mongo_uri: str,
) -> AsyncIterator[Any]:
    """Make extra ``AsyncMongoClient``s on the test server; all closed after the test."""
    clients: list[AsyncMongoClient[dict[str, Any]]] = []

    def make(**options: Any) -> AsyncMongoClient[dict[str, Any]]:
        options.setdefault("serverSelectionTimeoutMS", SERVER_SELECTION_TIMEOUT_MS)
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def sync_db(mongo_uri: str, mongo_database: AsyncDatabase[dict[str, Any]]) -> Iterator[Any]:
    """The test's database through a synchronous client, for reading raw documents."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri, tz_aware=True)
    with client:
        yield client[mongo_database.name]


# --- document shapes and indexes ------------------------------------------------------------


async def test_session_document_shape(mongo_database: AsyncDatabase[Any], sync_db: Any) -> None:
    store = MongoStore(mongo_database)
    record = await store.create_session("child", parent_id="parent")
    doc = sync_db.sessions.find_one({"_id": "child"})
    assert doc == {
        "_id": "child",
        "parent_id": "parent",
        "created_at": record.created_at,
        "next_seq": 0,
        "claims": 1,  # the default batch layout claims every entry (mongo_claims)
    }
    assert isinstance(doc["created_at"], datetime)  # a BSON date, not a string
    assert record.created_at.microsecond % 1000 == 0  # the clock is truncated to milliseconds
    assert abs(datetime.now(UTC) - record.created_at) < timedelta(minutes=1)
    assert await store.load_session("child") == record

    root = await store.create_session("root")
    assert root.parent_id is None
    assert sync_db.sessions.find_one({"_id": "root"})["parent_id"] is None


async def test_entry_document_shape_and_exact_wire(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, layout="entry")
    await store.create_session("s1")
    # Keys that would be operators or paths if entries were stored as sub-documents.
    custom = decode_entry(
        '{"type":"custom","id":"c1","parent_id":"m1","created_at":"2026-01-02T03:04:05.5Z",'
        '"kind":"x.unregistered","$set":{"a.b":1},"a.b":"$x"}'
    )
    batch: list[Entry] = [entry("m1", "héllo ✓"), custom]
    await store.append_entries("s1", batch)

    docs = list(sync_db.entries.find({"session_id": "s1"}, {"_id": 0}).sort("seq", 1))
    assert docs == [
        {
            "session_id": "s1",
            "entry_id": "m1",
            "seq": 0,
            "type": "message",
            "created_at": T0.replace(microsecond=123000),
            "wire": encode_entry(batch[0]),
        },
        {
            "session_id": "s1",
            "entry_id": "c1",
            "seq": 1,
            "type": "custom",
            "created_at": datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC),
            "wire": encode_entry(custom),
        },
    ]
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == 2
    loaded = await store.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in batch]
    assert isinstance(loaded[1], CustomEntry)
    assert loaded[1].model_extra == {"$set": {"a.b": 1}, "a.b": "$x"}


def _unique_indexes(sync_db: Any) -> set[tuple[tuple[str, int], ...]]:
    return {
        tuple(index["key"].items())
        for index in sync_db.entries.list_indexes()
        if index.get("unique")
    }


EXPECTED_INDEXES = {
    (("session_id", 1), ("entry_id", 1)),
    (("session_id", 1), ("seq", 1)),
    (("keys", 1),),  # batch documents' entry keys (sparse)
}


async def test_indexes_created_on_first_use(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    assert "entries" not in sync_db.list_collection_names()
    await store.create_session("s1")
    assert _unique_indexes(sync_db) == EXPECTED_INDEXES


async def test_ensure_indexes_explicit_and_idempotent(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    await MongoStore(mongo_database).ensure_indexes()
    assert _unique_indexes(sync_db) == EXPECTED_INDEXES
    await MongoStore(mongo_database).ensure_indexes()  # a second store object: no error
    assert _unique_indexes(sync_db) == EXPECTED_INDEXES


async def test_indexes_created_once_per_store_under_concurrency(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    commands = Commands()
    database = client_factory(event_listeners=[commands])[mongo_database.name]
    store = MongoStore(database)
    await asyncio.gather(*(store.create_session(f"s{i}") for i in range(10)))
    await store.append_entries("s0", [entry("e1")])
    assert commands.names().count("createIndexes") == 3
    assert commands.names().count("insert") == 12  # 10 sessions; claims + slot, the batch


async def test_unique_indexes_are_enforced_by_the_server(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("e1")])
    base = {"session_id": "s1", "type": "message", "created_at": T0, "wire": "{}"}
    with pytest.raises(DuplicateKeyError):
        sync_db.entries.insert_one({**base, "entry_id": "e1", "seq": 99})
    with pytest.raises(DuplicateKeyError):
        sync_db.entries.insert_one({**base, "entry_id": "other", "seq": 0})
    sync_db.entries.insert_one({**base, "session_id": "s2", "entry_id": "e1", "seq": 0})


async def test_seq_gaps_are_fine(mongo_database: AsyncDatabase[Any], sync_db: Any) -> None:
    store = MongoStore(mongo_database, layout="entry")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    sync_db.sessions.update_one({"_id": "s1"}, {"$inc": {"next_seq": 5}})  # an unused reservation
    await store.append_entries("s1", [entry("b"), entry("c")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c"]
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert seqs == [0, 6, 7]


async def test_corrupt_wire_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    sync_db.entries.insert_one(
        {"session_id": "s1", "entry_id": "b", "seq": 50, "type": "message", "wire": "{not json"}
    )
    with pytest.raises(CorruptSessionError, match="decode entry 'b'"):
        await store.load_entries("s1")


async def test_application_codec_options_do_not_matter(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """The store reads with its own codec options, whatever the application's client uses."""
    client = client_factory(document_class=RawBSONDocument, tz_aware=False)
    store = MongoStore(client[mongo_database.name])
    record = await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    assert await store.load_session("s1") == record
    assert record.created_at.tzinfo is not None
    assert ids(await store.load_entries("s1")) == ["a"]


def test_sync_database_is_refused(mongo_uri: str) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    with client, pytest.raises(TypeError, match="async database"):
        MongoStore(client["db"])  # type: ignore[arg-type]


# --- Motor ----------------------------------------------------------------------------------


async def test_motor_database(mongo_uri: str) -> None:
    from motor.motor_asyncio import AsyncIOMotorClient

    client: AsyncIOMotorClient[dict[str, Any]] = AsyncIOMotorClient(
        mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    name = new_database_name()
    try:
        store = MongoStore(client[name])
        record = await store.create_session("s1", parent_id="p")
        assert await store.load_session("s1") == record
        with pytest.raises(SessionExistsError):
            await store.create_session("s1")
        with pytest.raises(SessionNotFoundError):
            await store.load_entries("nope")
        with pytest.raises(SessionNotFoundError):
            await store.append_entries("nope", [entry("x")])

        await store.append_entries("s1", [entry("a"), entry("b", parent="a")])
        await store.append_entries("s1", [entry("b", parent="a"), entry("c", parent="b")])
        with pytest.raises(EntryConflictError):
            await store.append_entries("s1", [entry("d"), entry("a", "changed")])
        await store.append_entries("s1", [])
        await asyncio.gather(*(store.append_entries("s1", [entry(f"t{i}")]) for i in range(10)))

        loaded = await store.load_entries("s1")
        assert ids(loaded)[:3] == ["a", "b", "c"]
        assert sorted(ids(loaded)[3:]) == sorted(f"t{i}" for i in range(10))
        assert encode_entry(loaded[1]) == encode_entry(entry("b", parent="a"))
        with pytest.raises(InvalidSessionIdError):
            await store.load_entries({"$ne": None})  # type: ignore[arg-type]
    finally:
        await client.drop_database(name)
        client.close()


# --- concurrency ----------------------------------------------------------------------------


def assert_writer_orders(loaded: list[Entry], writers: dict[str, list[str]]) -> None:
    """No loss, no duplicate, and each writer's entries appear in the order it wrote them."""
    got = ids(loaded)
    assert len(got) == len(set(got))
    assert sorted(got) == sorted(eid for written in writers.values() for eid in written)
    for written in writers.values():
        assert [eid for eid in got if eid in set(written)] == written


async def test_twenty_tasks_append_to_one_session(mongo_database: AsyncDatabase[Any]) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    go = asyncio.Event()
    writers = {f"w{w}": [f"w{w}-{k}" for k in range(12)] for w in range(20)}

    async def write(name: str) -> None:
        await go.wait()
        written = writers[name]
        for c, k in enumerate(range(0, len(written), 3)):
            chunk = [entry(eid) for eid in written[k : k + 3]]
            if c % 2 == 0:  # batches of three and single entries interleave
                await store.append_entries("s1", chunk)
            else:
                for one in chunk:
                    await store.append_entries("s1", [one])

    tasks = [asyncio.create_task(write(name)) for name in writers]
    go.set()
    await asyncio.gather(*tasks)
    assert_writer_orders(await store.load_entries("s1"), writers)


async def test_two_stores_on_separate_clients(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    a = MongoStore(client_factory()[mongo_database.name], layout="entry")
    b = MongoStore(client_factory()[mongo_database.name], layout="entry")
    await a.create_session("s1")
    with pytest.raises(SessionExistsError):
        await b.create_session("s1")
    writers = {name: [f"{name}-{k}" for k in range(40)] for name in ("a", "b")}

    async def write(store: MongoStore, name: str) -> None:
        for k in range(0, 40, 4):
            await store.append_entries("s1", [entry(eid) for eid in writers[name][k : k + 4]])

    await asyncio.gather(write(a, "a"), write(b, "b"))
    for store in (a, b):
        assert_writer_orders(await store.load_entries("s1"), writers)
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"})]
    assert len(seqs) == len(set(seqs)) == 80


async def test_concurrent_identical_retries_store_once(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    stores = [MongoStore(client_factory()[mongo_database.name]) for _ in range(4)]
    await stores[0].create_session("s1")
    batch = [entry(f"e{i}", parent=f"e{i - 1}" if i else None) for i in range(5)]
    await asyncio.gather(*(stores[i % 4].append_entries("s1", batch) for i in range(12)))
    assert ids(await stores[0].load_entries("s1")) == ids(batch)


async def test_concurrent_conflicting_appends_one_wins(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    a = MongoStore(client_factory()[mongo_database.name])
    b = MongoStore(client_factory()[mongo_database.name])
    await a.create_session("s1")
    results = await asyncio.gather(
        a.append_entries("s1", [entry("x", "from a")]),
        b.append_entries("s1", [entry("x", "from b")]),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["EntryConflictError", "NoneType"]
    winner = "from a" if results[0] is None else "from b"
    [stored] = await a.load_entries("s1")
    assert encode_entry(stored) == encode_entry(entry("x", winner))


async def test_append_is_one_reservation_and_one_insert(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """No lookup before the insert: the insert's duplicate-key check is the idempotency check."""
    commands = Commands()
    store = MongoStore(
        client_factory(event_listeners=[commands])[mongo_database.name], layout="entry"
    )
    await store.create_session("s1")
    for size in (1, 10):
        commands.log.clear()
        await store.append_entries("s1", [entry(f"n{size}-{k}") for k in range(size)])
        assert commands.names() == ["findAndModify", "insert"]
        [(_, insert)] = [c for c in commands.log if c[0] == "insert"]
        assert len(insert["documents"]) == size
    assert len(await store.load_entries("s1")) == 11


async def test_stored_entries_found_through_the_duplicate_key(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Another writer stored ``b`` first: the insert stops at it, and the rest goes in after.

    A stored entry with other content is a conflict, and what the call inserted before it is
    deleted again: nothing of the batch stays (SPEC §2.1).
    """
    ours = MongoStore(mongo_database, layout="entry")
    other = MongoStore(mongo_database, layout="entry")
    await ours.create_session("s1")
    await other.append_entries("s1", [entry("b")])
    await ours.append_entries("s1", [entry("a"), entry("b"), entry("c")])
    assert ids(await ours.load_entries("s1")) == ["b", "a", "c"]
    assert sync_db.entries.count_documents({"session_id": "s1"}) == 3

    await other.append_entries("s1", [entry("z", "theirs")])
    with pytest.raises(EntryConflictError) as info:
        await ours.append_entries("s1", [entry("y"), entry("y2"), entry("z", "ours"), entry("w")])
    assert info.value.entry_id == "z"
    loaded = {e.id: encode_entry(e) for e in await ours.load_entries("s1")}
    assert sorted(loaded) == ["a", "b", "c", "z"]
    assert loaded["z"] == encode_entry(entry("z", "theirs"))


async def test_loser_of_a_conflicting_race_leaves_nothing(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """Two clients race batches that share the ID ``x`` with different content (issue 11.4).

    The first writer of ``x`` wins and its whole batch is stored; the other raises
    ``EntryConflictError`` and nothing of its batch stays, although its ordered insert stored
    the entries before ``x`` first. Repeated on fresh sessions, so the interleavings vary.
    """
    commands = Commands()
    a = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name], layout="entry")
    b = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name], layout="entry")
    batches = {
        "a": [entry("a0"), entry("a1", parent="a0"), entry("x", "from a"), entry("a2")],
        "b": [entry("b0"), entry("x", "from b"), entry("b1", parent="x")],
    }

    async def write(store: MongoStore, sid: str, batch: Sequence[Entry], go: asyncio.Event) -> None:
        await go.wait()
        await store.append_entries(sid, batch)

    rounds = 12
    for r in range(rounds):
        sid = f"race{r}"
        await a.create_session(sid)
        go = asyncio.Event()
        tasks = [
            asyncio.create_task(write(store, sid, batches[name], go))
            for store, name in ((a, "a"), (b, "b"))
        ]
        go.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        outcome = dict(zip("ab", results, strict=True))
        [winner] = [name for name, res in outcome.items() if res is None]
        [loser] = [name for name, res in outcome.items() if res is not None]
        failure = outcome[loser]
        assert isinstance(failure, EntryConflictError) and failure.entry_id == "x"
        stored = await a.load_entries(sid)
        assert ids(stored) == ids(batches[winner])  # all of the winner's, none of the loser's
        [x] = [e for e in stored if e.id == "x"]
        assert encode_entry(x) == encode_entry(entry("x", f"from {winner}"))
        assert ids(await b.load_entries(sid)) == ids(stored)
    # Every loser had stored the entries before "x" and deleted them again.
    assert 1 <= commands.names().count("delete") <= rounds


async def test_retries_and_a_conflicting_writer_race(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Three copies of batch A, one batch B that gives ``x`` other content, and two copies of an
    unrelated batch C race on six clients. Each batch is all-or-nothing: either every copy of A
    succeeds and nothing of B is stored, or B succeeds and nothing of A is; C always lands."""
    stores = [MongoStore(client_factory()[mongo_database.name], layout="entry") for _ in range(6)]
    a = [entry("a0"), entry("a1", parent="a0"), entry("a2"), entry("a3"), entry("x", "A")]
    b = [entry("b0"), entry("x", "B"), entry("b1")]
    c = [entry(f"c{i}") for i in range(5)]
    plan = [a, b, a, a, c, c]

    async def write(store: MongoStore, sid: str, batch: Sequence[Entry], go: asyncio.Event) -> None:
        await go.wait()
        await store.append_entries(sid, batch)

    for r in range(8):
        sid = f"mix{r}"
        await stores[0].create_session(sid)
        go = asyncio.Event()
        tasks = [
            asyncio.create_task(write(store, sid, batch, go))
            for store, batch in zip(stores, plan, strict=True)
        ]
        go.set()
        res = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(x is None or isinstance(x, EntryConflictError) for x in res), res
        assert res[4] is None and res[5] is None
        a_won = res[1] is not None
        assert [res[i] is None for i in (0, 2, 3)] == [a_won] * 3
        winner = a if a_won else b
        loaded = ids(await stores[1].load_entries(sid))
        assert sorted(loaded) == sorted(ids(winner) + ids(c))
        for batch in (winner, c):
            assert [eid for eid in loaded if eid in ids(batch)] == ids(batch)
        seqs = [d["seq"] for d in sync_db.entries.find({"session_id": sid})]
        assert len(seqs) == len(set(seqs))


async def test_cancelled_conflicting_append_still_rolls_back(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """The delete that undoes a conflicting batch is part of the shielded write."""
    commands = Commands()
    store = MongoStore(
        client_factory(event_listeners=[commands])[mongo_database.name], layout="entry"
    )
    await store.create_session("s1")
    await store.append_entries("s1", [entry("x", "stored")])
    inserting = commands.wait_for("started", "insert")
    deleted = commands.wait_for("succeeded", "delete")
    inserting.clear()
    task = asyncio.create_task(
        store.append_entries("s1", [entry("n1"), entry("n2"), entry("x", "changed")])
    )
    await asyncio.wait_for(inserting.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(deleted.wait(), timeout=10)
    [only] = await store.load_entries("s1")
    assert encode_entry(only) == encode_entry(entry("x", "stored"))


async def test_retry_after_a_stored_prefix_completes_in_batch_order(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """What a failure other than a conflict may leave, a prefix, is completed by the retry.

    The retry's insert stops at the first stored entry; the rest goes in on the numbers the
    retry already reserved (one reservation per append, also on this path).
    """
    commands = Commands()
    store = MongoStore(
        client_factory(event_listeners=[commands])[mongo_database.name], layout="entry"
    )
    await store.create_session("s1")
    batch = [entry(f"e{i}", parent=f"e{i - 1}" if i else None) for i in range(6)]
    await store.append_entries("s1", batch[:2])  # the prefix a failed call left
    commands.log.clear()
    await store.append_entries("s1", batch)
    assert commands.names().count("findAndModify") == 1
    assert commands.names().count("insert") == 2
    await store.append_entries("s1", batch)  # and a retry of the retry
    assert ids(await store.load_entries("s1")) == ids(batch)
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert seqs == [0, 1, 2, 3, 4, 5]  # the numbers of the stored prefix are not wasted


async def test_retry_numbered_below_a_concurrent_copy_keeps_batch_order(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A copy of the batch stored its first entries *above* the numbers the retry reserved (the
    retry reserved first, the copy inserted first): the rest must not go in on the retry's
    lower numbers, which would put ``a2`` before ``a0``. Driven with the counter: the copy's
    entries sit at 5 and 6 and the retry is handed 0..4."""
    copy = MongoStore(mongo_database, layout="entry")
    await copy.create_session("s1")
    batch = [entry(f"a{i}", parent=f"a{i - 1}" if i else None) for i in range(5)]
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 5}})
    await copy.append_entries("s1", batch[:2])  # a0, a1 at 5, 6
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 0}})
    retry = MongoStore(mongo_database, layout="entry")
    await retry.append_entries("s1", batch)
    assert ids(await retry.load_entries("s1")) == ids(batch)
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert seqs[:2] == [5, 6] and len(set(seqs)) == 5


async def test_counter_moving_backwards_keeps_order_and_loses_nothing(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """What FerretDB's non-atomic ``$inc`` does under concurrency, done here deterministically.

    A lost increment can set ``next_seq`` below numbers already used. The writer that used them
    still appends after its own entries (its floor), and a fresh store object handed taken
    numbers collides on the ``(session_id, seq)`` index and retries higher, losing nothing.
    """
    writer = MongoStore(mongo_database, layout="entry")
    await writer.create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 10}})  # seqs 0-9 unused
    await writer.append_entries("s1", [entry(f"e{i}") for i in range(5)])  # seqs 10-14
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 2}})  # a free, lower number
    await writer.append_entries("s1", [entry("e5")])
    assert ids(await writer.load_entries("s1")) == [f"e{i}" for i in range(6)]

    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 11}})  # taken numbers
    fresh = MongoStore(mongo_database, layout="entry")
    await fresh.append_entries("s1", [entry("x"), entry("y", parent="x")])
    assert ids(await fresh.load_entries("s1")) == [*(f"e{i}" for i in range(6)), "x", "y"]
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert len(seqs) == len(set(seqs)) == 8


async def test_entry_stored_under_a_foreign_id_is_still_found(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """An entry another program stored with an ObjectId ``_id`` still counts for idempotency.

    The primary-key lookup misses it; the ``(session_id, entry_id)`` index rejects the insert and
    the re-check through that index resolves it.
    """
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    sync_db.entries.insert_one(
        {
            "session_id": "s1",
            "entry_id": "f",
            "seq": 0,
            "type": "message",
            "created_at": T0,
            "wire": encode_entry(entry("f")),
        }
    )
    await store.append_entries("s1", [entry("f")])
    await store.append_entries("s1", [entry("f"), entry("g", parent="f")])
    assert ids(await store.load_entries("s1")) == ["f", "g"]
    with pytest.raises(EntryConflictError):
        await store.append_entries("s1", [entry("f", "changed")])
    assert sync_db.entries.count_documents({"session_id": "s1"}) == 2


async def test_large_batch_idempotency(mongo_database: AsyncDatabase[Any]) -> None:
    """Batches above the point-lookup limit are checked with one query, to the same effect."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    batch = [entry(f"e{i:03d}") for i in range(50)]
    await store.append_entries("s1", batch[:30])
    await store.append_entries("s1", batch)
    with pytest.raises(EntryConflictError):
        await store.append_entries("s1", [*batch, entry("e010", "changed"), entry("new")])
    assert ids(await store.load_entries("s1")) == ids(batch)


# --- bad input ------------------------------------------------------------------------------

BAD_IDS: list[Any] = [
    {"$ne": None},
    {"$gt": ""},
    ["a"],
    None,
    42,
    "",
    ".",
    "..",
    "../etc",
    "$where",
    "a$b",
    "sess/1",
    "a b",
    "x" * 201,
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_bad_session_ids_raise_before_any_query(
    client_factory: Any, mongo_database: AsyncDatabase[Any], bad: Any
) -> None:
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    calls = [
        store.create_session(bad),
        store.create_session("fine", parent_id=bad) if bad not in (None, "") else None,
        store.load_session(bad),
        store.load_entries(bad),
        store.append_entries(bad, [entry("e1")]),
        store.append_entries(bad, []),
        # validation precedes encoding: an oversized batch still reports the bad ID
        store.append_entries(bad, [entry("big", "x" * (DEFAULT_MAX_ENTRY_BYTES + 1))]),
    ]
    for call in calls:
        if call is None:
            continue
        with pytest.raises(InvalidSessionIdError):
            await call
    assert commands.names() == []
    await store.create_session("fine")  # the listener does see real traffic
    assert "insert" in commands.names()


async def test_dotted_ids_are_plain_values(mongo_database: AsyncDatabase[Any]) -> None:
    """Dots are allowed in session IDs (SPEC §1.4); as ``_id`` values they are never paths."""
    store = MongoStore(mongo_database)
    await store.create_session("user.42:ticket@a.b")
    await store.append_entries("user.42:ticket@a.b", [entry("e1")])
    assert ids(await store.load_entries("user.42:ticket@a.b")) == ["e1"]
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("user.42")


async def test_oversized_entry_writes_nothing_of_its_batch(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, max_entry_bytes=2000, layout="entry")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("before")])
    with pytest.raises(EntryTooLargeError) as info:
        await store.append_entries("s1", [entry("a"), entry("big", "x" * 2000), entry("c")])
    assert info.value.entry_id == "big"
    assert info.value.limit == 2000
    assert ids(await store.load_entries("s1")) == ["before"]
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == 1  # nothing even reserved
    batches = MongoStore(mongo_database, max_entry_bytes=2000)
    await batches.create_session("s2")
    with pytest.raises(EntryTooLargeError):
        await batches.append_entries("s2", [entry("a"), entry("big", "x" * 2000)])
    assert sync_db.entries_claims.count_documents({"s": "s2"}) == 0  # nothing even claimed


async def test_default_limit_is_15_mib_and_usable(mongo_database: AsyncDatabase[Any]) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    overhead = len(encode_entry(entry("big", "x")).encode()) - 1
    just_fits = entry("big", "x" * (DEFAULT_MAX_ENTRY_BYTES - overhead))
    assert len(encode_entry(just_fits).encode()) == DEFAULT_MAX_ENTRY_BYTES == 15 * 1024 * 1024
    too_big = entry("huge", "x" * (DEFAULT_MAX_ENTRY_BYTES - overhead + 1))
    with pytest.raises(EntryTooLargeError):
        await store.append_entries("s1", [too_big])
    await store.append_entries("s1", [just_fits])  # the server takes an entry at the limit
    [loaded] = await store.load_entries("s1")
    assert encode_entry(loaded) == encode_entry(just_fits)


# --- cancellation ---------------------------------------------------------------------------


async def test_cancel_before_io_has_no_effect(mongo_database: AsyncDatabase[Any]) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    task = asyncio.create_task(store.append_entries("s1", [entry("a")]))
    task.cancel()  # before the task first runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.load_entries("s1") == []


@pytest.mark.parametrize(("layout", "first"), [("entry", "findAndModify"), ("batch", "insert")])
async def test_started_write_completes_after_cancel(
    client_factory: Any, mongo_database: AsyncDatabase[Any], layout: Any, first: str
) -> None:
    """Cancelled once its first write went out (reserving numbers, or claiming the IDs), the
    append still completes (shielded), and the caller's retry is a no-op."""
    commands = Commands()
    inserts = InsertsCounted(wanted=2 if layout == "batch" else 1)  # claims, then the batch
    client = client_factory(event_listeners=[commands, inserts])
    store = MongoStore(client[mongo_database.name], layout=layout)
    await store.create_session("s1")
    started = commands.wait_for("started", first)
    started.clear()
    inserts.count = 0
    inserts.done.clear()
    batch = [entry("a"), entry("b")]
    task = asyncio.create_task(store.append_entries("s1", batch))
    await started.wait()  # the write has started
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await inserts.done.wait()  # the shielded write carried on to its last insert
    assert ids(await store.load_entries("s1")) == ["a", "b"]
    await store.append_entries("s1", batch)  # the caller's retry is a no-op
    assert ids(await store.load_entries("s1")) == ["a", "b"]


# --- a server that goes away ----------------------------------------------------------------


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[FerretDB]:
    """A FerretDB of this test's own, so stopping it leaves the shared server alone."""
    try:
        server = start_ferretdb(tmp_path / "ferretdb")
    except FerretDBUnavailable as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem and os.environ.get("MONGODB_URI"):
        pytest.skip(f"needs a FerretDB it can stop (the MONGODB_URI server is not): {problem}")
    if problem:
        pytest.fail(problem, pytrace=False)
    try:
        yield server
    finally:
        server.stop()


async def test_stopped_server_raises_unavailable_then_retry_succeeds_once(
    private_server: FerretDB,
) -> None:
    timeout_ms = 1000
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        private_server.uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms
    )
    try:
        store = MongoStore(client["faults"])
        await store.create_session("s1")
        await store.append_entries("s1", [entry("e1")])

        await asyncio.to_thread(private_server.stop)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "append": lambda: store.append_entries("s1", [entry("e2", parent="e1")]),
            "load_entries": lambda: store.load_entries("s1"),
            "load_session": lambda: store.load_session("s1"),
            "create": lambda: store.create_session("s2"),
        }
        for name, call in calls.items():
            began = time.monotonic()
            with pytest.raises(StoreUnavailableError) as info:
                await call()
            elapsed = time.monotonic() - began
            assert elapsed < 10, f"{name} took {elapsed:.1f}s"
            assert isinstance(info.value.__cause__, ConnectionFailure), name

        await asyncio.to_thread(private_server.start)  # same port, same data directory
        await store.append_entries("s1", [entry("e2", parent="e1")])  # the retried append
        await store.append_entries("s1", [entry("e2", parent="e1")])  # and once more
        assert ids(await store.load_entries("s1")) == ["e1", "e2"]
        await store.create_session("s2")
    finally:
        await client.close()


async def test_server_stopped_while_appending(private_server: FerretDB) -> None:
    """A writer loses the server mid-stream; after a restart its failed append, retried, lands once.

    Whether the failed append reached the server before it stopped is unknown to the writer
    (the stop races the write); idempotency makes the retry correct either way.
    """
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        private_server.uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000
    )
    try:
        store = MongoStore(client["faults"])
        await store.create_session("s1")
        five_done = asyncio.Event()
        failed: list[str] = []

        async def writer() -> None:
            for k in range(10_000):
                try:
                    await store.append_entries("s1", [entry(f"e{k}")])
                except StoreUnavailableError:
                    failed.append(f"e{k}")
                    return
                if k == 4:
                    five_done.set()

        task = asyncio.create_task(writer())
        await five_done.wait()
        await asyncio.to_thread(private_server.stop)
        await asyncio.wait_for(task, timeout=10)
        [lost] = failed
        n = int(lost[1:])

        await asyncio.to_thread(private_server.start)
        await store.append_entries("s1", [entry(lost)])
        assert ids(await store.load_entries("s1")) == [f"e{k}" for k in range(n + 1)]
    finally:
        await client.close()


@pytest.mark.parametrize("bad_seq", ["7", None], ids=["string", "missing"])
async def test_bad_entry_seq_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any, bad_seq: Any
) -> None:
    """A hand-damaged seq names the session and entry instead of silently moving the leaf."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    doc: dict[str, Any] = {
        "session_id": "s1",
        "entry_id": "b",
        "type": "message",
        "wire": encode_entry(entry("b")),
    }
    if bad_seq is not None:
        doc["seq"] = bad_seq
    sync_db.entries.insert_one(doc)
    with pytest.raises(CorruptSessionError, match=r"'s1'.*entry 'b'"):
        await store.load_entries("s1")


async def test_bad_created_at_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"created_at": "yesterday"}})
    with pytest.raises(CorruptSessionError, match="'s1'"):
        await store.load_session("s1")


async def test_unreachable_server_message_is_one_line() -> None:
    from tests.support.ferretdb import free_port

    port = free_port()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=300
    )
    try:
        store = MongoStore(client["x"])
        for call in (store.load_entries("s1"), store.create_session("s1")):
            with pytest.raises(StoreUnavailableError) as info:
                await call
            message = str(info.value)
            assert "\n" not in message and "Topology" not in message
            assert message.startswith(f"cannot reach MongoDB at 127.0.0.1:{port} (")
    finally:
        await client.close()


@pytest.mark.parametrize("layout", ["entry", "batch"])
async def test_string_next_seq_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any, layout: Any
) -> None:
    """A damaged counter is found by the next store object that reads it (a batch-layout
    object that created the session numbers from its own floor and never reads it)."""
    await MongoStore(mongo_database, layout=layout).create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": "3"}})
    with pytest.raises(CorruptSessionError, match="'s1'"):
        await MongoStore(mongo_database, layout=layout).append_entries("s1", [entry("a")])
