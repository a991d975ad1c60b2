"""MongoStore's batch layout (``layout="batch"``): one document per ``append_entries`` call.

What only this layout has: the batch document's shape, one lookup and one insert per append,
sessions written in the one-document-per-entry layout (written here directly with the driver, as
an older version stored them) still loading and appending, a batch split over the document size
limit, partial-overlap retries and conflicts against both layouts, an append that loses the
server mid-insert, and what the load does with a shared ID two racing batches both stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.ai import Message, TextContent
from durable_agent.session import (
    CorruptSessionError,
    Entry,
    EntryConflictError,
    MessageEntry,
    StoreUnavailableError,
    decode_entry,
    encode_entry,
)
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo_batch import split_documents
from durable_agent.stores.mongo_claims import wire_hash
from tests.support.ferretdb import FerretDB, FerretDBUnavailable, start_ferretdb
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS

pytestmark = pytest.mark.mongo

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
MIB = 1024 * 1024


def entry(eid: str, text: str | None = None, parent: str | None = None) -> MessageEntry:
    """A message entry with fixed content, so re-creating it gives an identical encoding."""
    message = Message(role="user", content=[TextContent(text=text or eid)], timestamp=T0)
    return MessageEntry(id=eid, parent_id=parent, created_at=T0, message=message)


def ids(entries: Sequence[Entry]) -> list[str]:
    return [e.id for e in entries]


def legacy_doc(sid: str, item: Entry, seq: int) -> dict[str, Any]:
    """An entry document exactly as the one-document-per-entry layout wrote it."""
    return {
        "_id": f"{sid}/{item.id}",
        "session_id": sid,
        "entry_id": item.id,
        "seq": seq,
        "type": item.type,
        "created_at": item.created_at,
        "wire": encode_entry(item),
    }


class Commands(monitoring.CommandListener):
    """The names of the commands a client sends; ``hook`` runs once, synchronously, when the
    first reply to a command named ``after`` arrives (before the client's caller sees it)."""

    def __init__(self, hook: Callable[[], object] | None = None, after: str = "find") -> None:
        self.names: list[str] = []
        self._hook = hook
        self._after = after

    def arm(self, hook: Callable[[], object]) -> None:
        """Run ``hook`` after the next reply to an ``after`` command."""
        self._hook = hook

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == self._after and self._hook is not None:
            hook, self._hook = self._hook, None
            hook()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def claim_ids(sync_db: Any, sid: str) -> set[str]:
    """The entry claims of a session (slots, ``<sid>#<seq>``, left out)."""
    return {d["_id"] for d in sync_db.entries_claims.find({"s": sid}) if "/" in d["_id"]}


@pytest.fixture
def sync_db(mongo_uri: str, mongo_database: AsyncDatabase[dict[str, Any]]) -> Iterator[Any]:
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri, tz_aware=True)
    with client:
        yield client[mongo_database.name]


@pytest.fixture
async def listened(
    mongo_uri: str, mongo_database: AsyncDatabase[Any]
) -> AsyncIterator[tuple[MongoStore, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_uri, event_listeners=[commands], serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    try:
        yield MongoStore(client[mongo_database.name], layout="batch"), commands
    finally:
        await client.close()


async def test_batch_document_shape_and_exact_wire(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    custom = decode_entry(
        '{"type":"custom","id":"c1","parent_id":"m1","created_at":"2026-01-02T03:04:05.5Z",'
        '"kind":"x.unregistered","$set":{"a.b":1},"a.b":"$x"}'
    )
    batch: list[Entry] = [entry("m1", "héllo ✓"), custom]
    await store.append_entries("s1", batch)
    await store.append_entries("s1", [entry("m2")])
    docs = list(sync_db.entries.find({"session_id": "s1"}).sort("seq", 1))
    assert docs == [
        {
            "_id": "s1/m1",
            "session_id": "s1",
            "entry_id": "m1",
            "seq": 0,
            "keys": ["s1/m1", "s1/c1"],
            "wires": [encode_entry(e) for e in batch],
        },
        {
            "_id": "s1/m2",
            "session_id": "s1",
            "entry_id": "m2",
            "seq": 2,
            "keys": ["s1/m2"],
            "wires": [encode_entry(entry("m2"))],
        },
    ]
    # Every entry has a claim pointing at its document, every append a slot (mongo_claims).
    claims = {d["_id"]: d for d in sync_db.entries_claims.find({"s": "s1"})}
    assert {k: d.get("b", d.get("n")) for k, d in claims.items()} == {
        "s1#0": 2, "s1/m1": "s1/m1", "s1/c1": "s1/m1", "s1#2": 1, "s1/m2": "s1/m2"
    }  # fmt: skip
    assert claims["s1/c1"]["h"] == wire_hash(encode_entry(custom))
    loaded = await store.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in [*batch, entry("m2")]]


async def test_new_batch_is_two_inserts(listened: tuple[MongoStore, Commands]) -> None:
    """No lookup and no counter for a batch of new IDs: one insert of its slot and claims, one
    of its document (mongo_claims); a batch with a stored ID looks it up and writes the rest."""
    store, commands = listened
    await store.create_session("s1")
    for size in (1, 10):
        commands.names.clear()
        await store.append_entries("s1", [entry(f"n{size}-{k}") for k in range(size)])
        assert commands.names == ["insert", "insert"]
    commands.names.clear()
    await store.append_entries("s1", [entry("n1-0"), entry("more")])
    assert "find" in commands.names
    assert ids(await store.load_entries("s1")) == [
        "n1-0", *(f"n10-{k}" for k in range(10)), "more"
    ]  # fmt: skip


async def test_fresh_store_walks_the_slots_and_moves_the_hint(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object that never saw the session starts at the session's ``next_seq`` hint,
    follows the taken slots to the end (its batch lands after all of them) and, after a long
    walk, moves the hint there, so the next newcomer starts near the end."""
    writer = MongoStore(mongo_database, layout="batch")
    await writer.create_session("s1")
    for k in range(20):
        await writer.append_entries("s1", [entry(f"w{k}-{i}") for i in range(k % 3 + 1)])
    end = sum(k % 3 + 1 for k in range(20))
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == 0
    await MongoStore(mongo_database, layout="batch").append_entries("s1", [entry("late")])
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == end
    assert sync_db.entries.find_one({"_id": "s1/late"})["seq"] == end
    await writer.append_entries("s1", [entry("after")])  # its floor is behind: walks one slot
    loaded = ids(await MongoStore(mongo_database, layout="batch").load_entries("s1"))
    assert loaded[-2:] == ["late", "after"] and len(loaded) == end + 2


async def test_overlapping_retry_stores_only_the_new_entry(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """[b, c] after [a, b]: b is claimed and stored, so only c is written, after b."""
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b")])
    for retry in (store, MongoStore(mongo_database, layout="batch")):
        await retry.append_entries("s1", [entry("b"), entry("c")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c"]
    keys = [d["keys"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert keys == [["s1/a", "s1/b"], ["s1/c"]]
    assert claim_ids(sync_db, "s1") == {"s1/a", "s1/b", "s1/c"}


async def test_concurrent_writers_of_one_batch_store_one_copy(
    mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Two store objects (two clients, as two workers) append the same batches at once: every
    batch is stored exactly once, whichever wins each race."""
    clients: list[AsyncMongoClient[dict[str, Any]]] = [
        AsyncMongoClient(mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS)
        for _ in range(2)
    ]
    try:
        a, b = (MongoStore(c[mongo_database.name], layout="batch") for c in clients)
        await a.create_session("s1")
        await b.load_entries("s1")
        for k in range(15):
            batch = [entry(f"e{k}-{i}") for i in range(k % 4 + 1)]
            await asyncio.gather(a.append_entries("s1", batch), b.append_entries("s1", batch))
    finally:
        for client in clients:
            await client.close()
    expected = [f"e{k}-{i}" for k in range(15) for i in range(k % 4 + 1)]
    stored = [
        key for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1) for key in d["keys"]
    ]
    assert stored == [f"s1/{e}" for e in expected]  # one copy of each, in order
    assert ids(await MongoStore(mongo_database, layout="batch").load_entries("s1")) == expected


async def test_concurrent_writers_of_different_batches_keep_each_order(
    mongo_uri: str, mongo_database: AsyncDatabase[Any]
) -> None:
    """Two store objects append their own batches at once: nothing is lost, and each writer's
    batches read back in the order it wrote them (the slots referee the numbers)."""
    clients: list[AsyncMongoClient[dict[str, Any]]] = [
        AsyncMongoClient(mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS)
        for _ in range(2)
    ]
    try:
        stores = [MongoStore(c[mongo_database.name], layout="batch") for c in clients]
        await stores[0].create_session("s1")

        async def writer(n: int) -> None:
            for k in range(20):
                await stores[n].append_entries("s1", [entry(f"w{n}-{k}-{i}") for i in range(2)])

        await asyncio.gather(writer(0), writer(1))
    finally:
        for client in clients:
            await client.close()
    loaded = ids(await MongoStore(mongo_database, layout="batch").load_entries("s1"))
    for n in range(2):
        assert [e for e in loaded if e.startswith(f"w{n}-")] == [
            f"w{n}-{k}-{i}" for k in range(20) for i in range(2)
        ]
    assert len(loaded) == 80


async def test_legacy_layout_loads_and_appends(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A session an older version wrote, one document per entry: it loads in ``seq`` order,
    new appends land after it as batch documents, and its entries still count for
    idempotency and conflicts wherever they sit in a batch."""
    store = MongoStore(mongo_database, layout="batch")
    # The session document as an older version created it (no claims document).
    sync_db.sessions.insert_one({"_id": "old", "parent_id": None, "created_at": T0, "next_seq": 0})
    legacy = [entry("l0"), entry("l1", parent="l0"), entry("l2", parent="l1")]
    sync_db.entries.insert_many([legacy_doc("old", e, seq) for seq, e in enumerate(legacy)])
    sync_db.sessions.update_one({"_id": "old"}, {"$set": {"next_seq": 3}})
    assert [encode_entry(e) for e in await store.load_entries("old")] == [
        encode_entry(e) for e in legacy
    ]

    await store.append_entries("old", [entry("n0"), entry("l1", parent="l0"), entry("n1")])
    await store.append_entries("old", [entry("l2", parent="l1")])  # all stored: a no-op
    with pytest.raises(EntryConflictError):
        await store.append_entries("old", [entry("n2"), entry("l2", "changed")])
    assert ids(await store.load_entries("old")) == ["l0", "l1", "l2", "n0", "n1"]
    assert sync_db.entries.count_documents({"session_id": "old"}) == 4  # 3 legacy + 1 batch
    # Its first append gave the stored entries claims and marked the session.
    assert claim_ids(sync_db, "old") == {f"old/{e}" for e in ("l0", "l1", "l2", "n0", "n1")}
    assert sync_db.sessions.find_one({"_id": "old"})["claims"] == 1


async def test_old_batch_documents_without_claims_load_and_append(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Batch documents an older version wrote (its claims lived elsewhere, its session document
    has no ``claims`` mark and a stale ``next_seq``): the first append claims them, numbers
    after them, and their entries count for idempotency and conflicts at any position."""
    sync_db.sessions.insert_one({"_id": "ob", "parent_id": None, "created_at": T0, "next_seq": 0})
    old = [[entry("o0"), entry("o1")], [entry("o2"), entry("o3"), entry("o4")]]
    seq = 0
    for run in old:
        sync_db.entries.insert_one(
            {
                "_id": f"ob/{run[0].id}",
                "session_id": "ob",
                "entry_id": run[0].id,
                "seq": seq,
                "keys": [f"ob/{e.id}" for e in run],
                "wires": [encode_entry(e) for e in run],
            }
        )
        seq += len(run)
    store = MongoStore(mongo_database)  # the default layout
    await store.append_entries("ob", [entry("o3"), entry("n0")])
    with pytest.raises(EntryConflictError):
        await store.append_entries("ob", [entry("n1"), entry("o1", "changed")])
    assert ids(await store.load_entries("ob")) == ["o0", "o1", "o2", "o3", "o4", "n0"]
    assert sync_db.entries.find_one({"_id": "ob/n0"})["seq"] >= 5  # after o4 (seq 4)
    assert claim_ids(sync_db, "ob") == {f"ob/{e}" for e in ("o0", "o1", "o2", "o3", "o4", "n0")}


async def test_partial_overlap_retry_stores_only_the_rest(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b"), entry("c")])
    await store.append_entries("s1", [entry("b"), entry("d")])  # b stored, not first in its doc
    await store.append_entries("s1", [entry("x"), entry("c"), entry("a"), entry("y")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c", "d", "x", "y"]
    keys = [d["keys"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert keys == [["s1/a", "s1/b", "s1/c"], ["s1/d"], ["s1/x", "s1/y"]]


async def test_conflict_on_any_position_writes_nothing(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b")])
    for batch in (
        [entry("n1"), entry("b", "changed"), entry("n2")],
        [entry("a", "changed")],
        [entry("b", parent="other")],
    ):
        with pytest.raises(EntryConflictError) as info:
            await store.append_entries("s1", batch)
        assert info.value.entry_id in {"a", "b"}
    assert ids(await store.load_entries("s1")) == ["a", "b"]
    assert sync_db.entries.count_documents({}) == 1
    assert claim_ids(sync_db, "s1") == {"s1/a", "s1/b"}  # the failed batches' claims released
    await store.append_entries("s1", [entry("n1"), entry("n2")])  # so n1 and n2 are free
    assert ids(await store.load_entries("s1")) == ["a", "b", "n1", "n2"]


def test_split_documents_keeps_order_under_the_limit() -> None:
    batch: list[tuple[Entry, str]] = [
        (entry(f"e{i}", "x" * 300), encode_entry(entry(f"e{i}", "x" * 300))) for i in range(9)
    ]
    runs = split_documents("s", batch, limit=1500)
    assert [item for run in runs for item in run] == batch
    assert len(runs) > 1 and all(run for run in runs)
    assert split_documents("s", batch) == [batch]


async def test_batch_over_the_document_limit_is_split(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Three 6 MiB entries (18 MiB) cannot share one 16 MiB document: two documents, in order,
    and a retry of the whole batch is a no-op."""
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("big")
    batch = [entry(f"b{i}", chr(ord("a") + i) * (6 * MIB)) for i in range(3)]
    await store.append_entries("big", [entry("first"), *batch])
    await store.append_entries("big", batch)
    docs = list(sync_db.entries.find({"session_id": "big"}, {"keys": 1, "seq": 1}).sort("seq", 1))
    assert [d["keys"] for d in docs] == [["big/first", "big/b0", "big/b1"], ["big/b2"]]
    assert [d["seq"] for d in docs] == [0, 3]
    loaded = await store.load_entries("big")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in [entry("first"), *batch]]


async def test_split_batch_conflict_found_late_rolls_back(
    mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A split batch whose second document collides (a writer without claims stored its first
    entry with other content after this call claimed the IDs): the first document, already
    inserted, is deleted again with the call's claims, and the call raises the conflict, so
    nothing of the batch stays.

    The other writer is a document inserted the moment the claims insert's reply arrives,
    before the store's document insert goes out.
    """
    rival = legacy_doc("s1", entry("b2", "rival"), 1000)
    commands = Commands(hook=lambda: sync_db.entries.insert_one(rival), after="insert")
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_uri, event_listeners=[commands], serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    try:
        store = MongoStore(client[mongo_database.name], layout="batch")
        await store.create_session("s1")
        commands.names.clear()
        batch = [entry(f"b{i}", chr(ord("a") + i) * (6 * MIB)) for i in range(3)]
        with pytest.raises(EntryConflictError) as info:
            await store.append_entries("s1", batch)
    finally:
        await client.close()
    assert info.value.entry_id == "b2"
    assert commands.names[:2] == ["insert", "insert"]  # claims, then the two documents
    assert [d["_id"] for d in sync_db.entries.find({"session_id": "s1"})] == ["s1/b2"]
    assert claim_ids(sync_db, "s1") == set()
    assert ids(await MongoStore(mongo_database, layout="batch").load_entries("s1")) == ["b2"]


async def test_duplicate_id_across_batch_documents_on_load(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Two batches sharing an ID, both stored (a race FerretDB does not referee): an identical
    copy is returned once; a differing one is a typed error, never a silent wrong entry."""
    store = MongoStore(mongo_database, layout="batch")
    for sid, shared in (("same", entry("x")), ("diff", entry("x", "other"))):
        await store.create_session(sid)
        await store.append_entries(sid, [entry("a"), entry("x")])
        sync_db.entries.insert_one(
            {
                "_id": f"{sid}/b",
                "session_id": sid,
                "entry_id": "b",
                "seq": 10,
                "keys": [f"{sid}/b", f"{sid}/x"],
                "wires": [encode_entry(entry("b")), encode_entry(shared)],
            }
        )
    assert ids(await store.load_entries("same")) == ["a", "x", "b"]
    with pytest.raises(CorruptSessionError, match="'x' is stored twice"):
        await store.load_entries("diff")


@pytest.mark.parametrize(
    "damage",
    [{"wires": "not a list"}, {"wires": [1, 2]}, {"wires": ["{bad json"]}, {"seq": "0"}],
    ids=["wires-string", "wires-ints", "bad-wire", "seq-string"],
)
async def test_damaged_batch_document_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any, damage: dict[str, Any]
) -> None:
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b")])
    sync_db.entries.update_one({"_id": "s1/a"}, {"$set": damage})
    with pytest.raises(CorruptSessionError):
        await store.load_entries("s1")


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[FerretDB]:
    try:
        server = start_ferretdb(tmp_path / "ferretdb")
    except FerretDBUnavailable as exc:
        pytest.skip(f"needs a FerretDB it can stop: {exc}")
    try:
        yield server
    finally:
        server.stop()


async def test_server_lost_mid_batch_leaves_all_or_nothing(private_server: FerretDB) -> None:
    """10-entry batches while the server is stopped: the failed batch is either wholly stored
    or absent (one document), and its retry after the restart completes it exactly once."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        private_server.uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000
    )
    try:
        store = MongoStore(client["faults"], layout="batch")
        await store.create_session("s1")
        three_done = asyncio.Event()
        failed: list[int] = []

        def batch(k: int) -> list[Entry]:
            return [entry(f"e{k}-{i}") for i in range(10)]

        async def writer() -> None:
            for k in range(10_000):
                try:
                    await store.append_entries("s1", batch(k))
                except StoreUnavailableError:
                    failed.append(k)
                    return
                if k == 2:
                    three_done.set()

        task = asyncio.create_task(writer())
        await three_done.wait()
        await asyncio.to_thread(private_server.stop)
        await asyncio.wait_for(task, timeout=10)
        [lost] = failed
        await asyncio.to_thread(private_server.start)
        loaded = ids(await store.load_entries("s1"))
        assert loaded in (
            [f"e{k}-{i}" for k in range(n) for i in range(10)] for n in (lost, lost + 1)
        )
        await store.append_entries("s1", batch(lost))
        assert ids(await store.load_entries("s1")) == [
            f"e{k}-{i}" for k in range(lost + 1) for i in range(10)
        ]
    finally:
        await client.close()


async def test_claims_without_their_document_are_completed_by_a_retry(
    private_server: FerretDB,
) -> None:
    """The crash window: the slot and claims of [a, b] went in, then the server went away
    before the batch document did. A retry (by a fresh object, as after a worker crash, or by
    the same one) notices the IDs are claimed but not stored and writes them, once. Nothing was
    stored, so a retry whose content differs from the crashed attempt's is stored too (as in
    the per-entry layout): only a stored entry wins."""
    commands = Commands(after="insert")
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        private_server.uri,
        serverSelectionTimeoutMS=1000,
        connectTimeoutMS=1000,
        event_listeners=[commands],
    )
    sync: MongoClient[dict[str, Any]] = MongoClient(private_server.uri, tz_aware=True)
    try:
        store = MongoStore(client["crash"], layout="batch")
        await store.create_session("s1")
        await store.append_entries("s1", [entry("first")])
        commands.arm(private_server.stop)  # right after the claims insert's reply
        with pytest.raises(StoreUnavailableError):
            await store.append_entries("s1", [entry("a"), entry("b")])
        await asyncio.to_thread(private_server.start)
        db = sync["crash"]
        assert claim_ids(db, "s1") == {"s1/first", "s1/a", "s1/b"}
        assert db.entries.count_documents({"session_id": "s1"}) == 1  # no document of [a, b]
        fresh = MongoStore(client["crash"], layout="batch")
        await fresh.append_entries("s1", [entry("a"), entry("b", "changed")])
        await fresh.append_entries("s1", [entry("a"), entry("b", "changed")])  # now a no-op
        with pytest.raises(EntryConflictError) as info:
            await store.append_entries("s1", [entry("a"), entry("b")])  # b is stored otherwise
        assert info.value.entry_id == "b"
        loaded = await store.load_entries("s1")
        assert [encode_entry(e) for e in loaded] == [
            encode_entry(e) for e in (entry("first"), entry("a"), entry("b", "changed"))
        ]
        assert db.entries.count_documents({"session_id": "s1"}) == 2
        claim = db.entries_claims.find_one({"_id": "s1/b"})
        assert claim is not None and claim["b"] == "s1/a"
        assert claim["h"] == wire_hash(encode_entry(entry("b", "changed")))
    finally:
        sync.close()
        await client.close()
