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
from durable_agent.stores.mongo_claims import id_hash
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
    """The names of the commands a client sends; ``after_find`` runs once, synchronously, when
    the first ``find`` reply arrives (before the client's caller sees it)."""

    def __init__(self, after_find: Callable[[], object] | None = None) -> None:
        self.names: list[str] = []
        self._after_find = after_find

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "find" and self._after_find is not None:
            hook, self._after_find = self._after_find, None
            hook()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


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
    # The batch layout's counter lives in the session's claims document (mongo_claims).
    assert sync_db.entries_ids.find_one({"_id": "s1"})["n"] == 3
    loaded = await store.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in [*batch, entry("m2")]]


async def test_new_batch_is_one_reservation_one_claim_one_insert(
    listened: tuple[MongoStore, Commands],
) -> None:
    """No lookup for a batch of new IDs: the claim proves them new (mongo_claims); a batch with
    a stored ID looks it up (``find``) and writes only the rest."""
    store, commands = listened
    await store.create_session("s1")
    for size in (1, 10):
        commands.names.clear()
        await store.append_entries("s1", [entry(f"n{size}-{k}") for k in range(size)])
        assert commands.names == ["findAndModify", "insert"]  # claim and reserve, insert
    commands.names.clear()
    await store.append_entries("s1", [entry("n1-0"), entry("more")])
    assert "find" in commands.names
    assert ids(await store.load_entries("s1")) == [
        "n1-0", *(f"n10-{k}" for k in range(10)), "more"
    ]  # fmt: skip


async def test_claimed_but_unstored_id_is_written(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A claim whose insert never happened (the writer lost the server in between) only sends
    the next append down the careful path: the entry is stored, once."""
    store = MongoStore(mongo_database, layout="batch")
    await store.create_session("s1")
    sync_db.entries_ids.update_one({"_id": "s1"}, {"$push": {"h": id_hash("a")}})
    await store.append_entries("s1", [entry("a"), entry("b")])
    await store.append_entries("s1", [entry("a"), entry("b")])
    assert ids(await store.load_entries("s1")) == ["a", "b"]
    assert sync_db.entries.count_documents({}) == 1
    claimed = sync_db.entries_ids.find_one({"_id": "s1"})["h"]
    assert sorted(claimed) == sorted({id_hash("a"), id_hash("b")})


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
    # Its first append built the claims document from the stored IDs.
    claimed = set(sync_db.entries_ids.find_one({"_id": "old"})["h"])
    assert claimed == {id_hash(e) for e in ("l0", "l1", "l2", "n0", "n1")}


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
    """A split batch whose second document collides (another writer stored its first entry with
    other content after this call's lookup): the first document, already inserted, is deleted
    again and the call raises the conflict, so nothing of the batch stays.

    The other writer is a document inserted the moment the lookup's reply arrives, before the
    store's insert goes out.
    """
    rival = legacy_doc("s1", entry("b2", "rival"), 1000)
    commands = Commands(after_find=lambda: sync_db.entries.insert_one(rival))
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_uri, event_listeners=[commands], serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    try:
        store = MongoStore(client[mongo_database.name], layout="batch")
        await store.create_session("s1")
        batch = [entry(f"b{i}", chr(ord("a") + i) * (6 * MIB)) for i in range(3)]
        with pytest.raises(EntryConflictError) as info:
            await store.append_entries("s1", batch)
    finally:
        await client.close()
    assert info.value.entry_id == "b2"
    assert commands.names.count("delete") == 1  # the rollback of the first document
    assert [d["_id"] for d in sync_db.entries.find({"session_id": "s1"})] == ["s1/b2"]
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
