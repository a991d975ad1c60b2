"""What MongoStore stores and how it reads it back (docs/design.md#mongo-store).

The session and batch document shapes, exact wires, the unique indexes, seq gaps, codec options,
Motor, documents split under the size limit, input refused before any query, the size limit,
and damaged documents raising ``CorruptSessionError``.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from durable_agent.session import (
    CorruptSessionError,
    CustomEntry,
    Entry,
    EntryConflictError,
    EntryTooLargeError,
    InvalidSessionIdError,
    SessionExistsError,
    SessionNotFoundError,
    decode_entry,
    encode_entry,
)
from durable_agent.stores.mongo import DEFAULT_MAX_ENTRY_BYTES, MongoStore
from durable_agent.stores.mongo.batches import split_documents
from durable_agent.stores.mongo.claims import wire_hash
from tests.mongo.helpers import (
    MIB,
    Commands,
    batch_doc,
    claim_ids,
    entry,
    ids,
    inc_of,
    keys_of,
    of_session,
)
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS, new_database_name

pytestmark = pytest.mark.mongo


# --- document shapes and indexes ------------------------------------------------------------


async def test_session_document_shape(mongo_database: AsyncDatabase[Any], sync_db: Any) -> None:
    store = MongoStore(mongo_database)
    record = await store.create_session("child", parent_id="parent")
    doc = sync_db.sessions.find_one({"_id": "child"})
    assert doc == {
        "_id": "child",
        "inc": doc["inc"],
        "parent_id": "parent",
        "created_at": record.created_at,
        "next_seq": 0,
    }
    assert re.fullmatch("[0-9a-f]{16}", doc["inc"])  # a fresh incarnation per create
    assert isinstance(doc["created_at"], datetime)  # a BSON date, not a string
    assert record.created_at.microsecond % 1000 == 0  # the clock is truncated to milliseconds
    assert abs(datetime.now(UTC) - record.created_at) < timedelta(minutes=1)
    assert await store.load_session("child") == record

    root = await store.create_session("root")
    assert root.parent_id is None
    assert sync_db.sessions.find_one({"_id": "root"})["parent_id"] is None


async def test_batch_document_shape_and_exact_wire(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    # Keys that would be operators or paths if entries were stored as sub-documents.
    custom = decode_entry(
        '{"type":"custom","id":"c1","parent_id":"m1","created_at":"2026-01-02T03:04:05.5Z",'
        '"kind":"x.unregistered","$set":{"a.b":1},"a.b":"$x"}'
    )
    batch: list[Entry] = [entry("m1", "héllo ✓"), custom]
    await store.append_entries("s1", batch)
    await store.append_entries("s1", [entry("m2")])
    docs = list(sync_db.entries.find({"session_id": "s1"}).sort("seq", 1))
    p = f"s1/{inc_of(sync_db, 's1')}"  # every key starts with the session and its incarnation
    assert docs == [
        {
            "_id": f"{p}#0",
            "session_id": "s1",
            "inc": p[3:],
            "entry_id": "m1",
            "seq": 0,
            "keys": [f"{p}/m1", f"{p}/c1"],
            "wires": [encode_entry(e) for e in batch],
        },
        {
            "_id": f"{p}#2",
            "session_id": "s1",
            "inc": p[3:],
            "entry_id": "m2",
            "seq": 2,
            "keys": [f"{p}/m2"],
            "wires": [encode_entry(entry("m2"))],
        },
    ]
    # Every entry has a claim pointing at its document, every append a slot (claims module).
    claims = {d["_id"]: d for d in sync_db.entries_claims.find(of_session("s1"))}
    assert all(d["i"] == p[3:] for d in claims.values())
    # nothing a query or a writer does not read: the session is the _id's prefix
    assert all(set(d) <= {"_id", "i", "h", "q", "n", "t"} for d in claims.values())
    assert {k: d.get("q", d.get("n")) for k, d in claims.items()} == {
        f"{p}#0": 2, f"{p}/m1": 0, f"{p}/c1": 0, f"{p}#2": 1, f"{p}/m2": 2
    }  # fmt: skip
    assert claims[f"{p}/c1"]["h"] == wire_hash(encode_entry(custom))
    loaded = await store.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in [*batch, entry("m2")]]
    assert isinstance(loaded[1], CustomEntry)
    assert loaded[1].model_extra == {"$set": {"a.b": 1}, "a.b": "$x"}


def _unique_indexes(sync_db: Any) -> set[tuple[tuple[str, int], ...]]:
    return {
        tuple(index["key"].items())
        for index in sync_db.entries.list_indexes()
        if index.get("unique")
    }


EXPECTED_INDEXES = {
    (("session_id", 1), ("inc", 1), ("seq", 1)),  # a load's range; one document per place
    (("keys", 1),),  # every entry's key
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
    assert commands.names().count("createIndexes") == 2
    assert commands.names().count("insert") == 12  # 10 sessions; claims + slot, the batch


async def test_unique_indexes_are_enforced_by_the_server(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("e1")])
    with pytest.raises(DuplicateKeyError):  # (session_id, inc, seq): a fence's hold
        sync_db.entries.insert_one(batch_doc(sync_db, "s1", [entry("other")], 0, _id="x"))
    with pytest.raises(DuplicateKeyError):  # _id: the place of a batch
        sync_db.entries.insert_one({**batch_doc(sync_db, "s1", [entry("other")], 0), "seq": 5})
    await store.create_session("s2")
    sync_db.entries.insert_one(batch_doc(sync_db, "s2", [entry("e1")], 0))


async def test_seq_gaps_are_fine(mongo_database: AsyncDatabase[Any], sync_db: Any) -> None:
    """A slot whose writer never stored its document (a crash) leaves a gap: the next writer
    walks past it, and loads are unaffected."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    inc = inc_of(sync_db, "s1")
    slot = {"_id": f"s1/{inc}#1", "i": inc, "n": 5}
    sync_db.entries_claims.insert_one(slot)  # a crashed writer's
    await MongoStore(mongo_database).append_entries("s1", [entry("b"), entry("c")])
    await store.append_entries("s1", [entry("d")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c", "d"]
    seqs = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert seqs == [0, 6, 8]


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
        assert [seq for seq, _ in await store.load_entries_after("s1", 11)] == [12, 13]
        with pytest.raises(InvalidSessionIdError):
            await store.load_entries({"$ne": None})  # type: ignore[arg-type]
    finally:
        await client.drop_database(name)
        client.close()


# --- documents split under the size limit ---------------------------------------------------


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
    each naming their slot, and a retry of the whole batch stores nothing (the slot it took is
    fenced, so readers do not wait for it)."""
    store = MongoStore(mongo_database)
    await store.create_session("big")
    batch = [entry(f"b{i}", chr(ord("a") + i) * (6 * MIB)) for i in range(3)]
    await store.append_entries("big", [entry("first"), *batch])
    await store.append_entries("big", batch)
    assert keys_of(sync_db, "big") == [["first", "b0", "b1"], ["b2"]]
    docs = list(sync_db.entries.find({"session_id": "big"}, {"seq": 1, "slot": 1, "fence": 1}))
    assert sorted((d["seq"], d.get("slot"), d.get("fence")) for d in docs) == [
        (0, [0, 4], None),
        (3, [0, 4], None),
        (4, None, True),
    ]
    assert await store.load_entries_after("big", 1) == list(enumerate(batch, 2))
    loaded = await store.load_entries("big")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in [entry("first"), *batch]]


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
        store.load_entries_after(bad, 0),
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
    """Dots are allowed in session IDs (docs/design.md#sessions-and-entries); as ``_id`` values
    they are never paths."""
    store = MongoStore(mongo_database)
    await store.create_session("user.42:ticket@a.b")
    await store.append_entries("user.42:ticket@a.b", [entry("e1")])
    assert ids(await store.load_entries("user.42:ticket@a.b")) == ["e1"]
    with pytest.raises(SessionNotFoundError):
        await store.load_entries("user.42")


async def test_oversized_entry_writes_nothing_of_its_batch(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database, max_entry_bytes=2000)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("before")])
    with pytest.raises(EntryTooLargeError) as info:
        await store.append_entries("s1", [entry("a"), entry("big", "x" * 2000), entry("c")])
    assert info.value.entry_id == "big"
    assert info.value.limit == 2000
    assert ids(await store.load_entries("s1")) == ["before"]
    assert claim_ids(sync_db, "s1") == {"before"}
    assert sync_db.entries_claims.count_documents(of_session("s1")) == 2  # and its slot


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


# --- damaged documents ----------------------------------------------------------------------


async def test_corrupt_wire_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    sync_db.entries.insert_one(batch_doc(sync_db, "s1", [entry("b")], 50, wires=["{not json"]))
    with pytest.raises(CorruptSessionError, match="decode entry 'b'"):
        await store.load_entries("s1")


_HEAD = '{"type":"message","id":"b",'
_BODY = '"message":{"role":"user","content":[]}}'


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (_HEAD + '"created_at":5,' + _BODY, "created_at must be a string"),
        (_HEAD + '"created_at":"yesterday",' + _BODY, "not an RFC 3339 time"),
        (_HEAD + _BODY, "created_at must be a string"),
        ('{"type":"message","id":"","created_at":"2026-01-02T03:04:05Z",' + _BODY, "id must be"),
        (_HEAD + '"created_at":"2026-01-02T03:04:05Z","message":{"role":"nobody"}}', "role"),
        (_HEAD + '"created_at":"2026-01-02T03:04:05Z","message":[1]}', "message"),
    ],
    ids=["created-at-number", "created-at-text", "no-created-at", "empty-id", "bad-role", "list"],
)
async def test_a_damaged_message_wire_names_the_entry_and_why(
    mongo_database: AsyncDatabase[Any], sync_db: Any, wire: str, reason: str
) -> None:
    """Message wires that look canonical but are not valid (what a load's fast path refuses and
    the general decoder explains): a typed error naming the session, the document's first entry
    and the reason, never a default value or a silently skipped entry."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    sync_db.entries.insert_one(batch_doc(sync_db, "s1", [entry("b")], 50, wires=[wire]))
    with pytest.raises(CorruptSessionError, match=r"'s1'.*decode entry 'b'") as info:
        await store.load_entries("s1")
    assert reason in str(info.value)


@pytest.mark.parametrize(
    "damage",
    [
        {"$set": {"wires": "not a list"}},
        {"$set": {"wires": [1, 2]}},
        {"$set": {"wires": ["{bad json"]}},
        {"$set": {"seq": "0"}},
        {"$unset": {"seq": ""}},
    ],
    ids=["wires-string", "wires-ints", "bad-wire", "seq-string", "seq-missing"],
)
async def test_damaged_batch_document_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any, damage: dict[str, Any]
) -> None:
    """A hand-damaged document names the session and its entry instead of silently moving the
    leaf."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    await store.append_entries("s1", [entry("b"), entry("c")])
    sync_db.entries.update_one({"session_id": "s1", "entry_id": "b"}, damage)
    with pytest.raises(CorruptSessionError, match=r"'s1'.*'b'"):
        await store.load_entries("s1")


async def test_duplicate_id_across_batch_documents_on_load(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Two batches sharing an ID, both stored (the writers never do it; a foreign or
    hand-edited document might): an identical copy is returned once; a differing one is a typed
    error, never a silent wrong entry."""
    store = MongoStore(mongo_database)
    for sid, shared in (("same", entry("x")), ("diff", entry("x", "other"))):
        await store.create_session(sid)
        await store.append_entries(sid, [entry("a"), entry("x")])
        sync_db.entries.insert_one(batch_doc(sync_db, sid, [entry("b"), shared], 10))
    assert ids(await store.load_entries("same")) == ["a", "x", "b"]
    with pytest.raises(CorruptSessionError, match="'x' is stored twice"):
        await store.load_entries("diff")


async def test_bad_created_at_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"created_at": "yesterday"}})
    with pytest.raises(CorruptSessionError, match="'s1'"):
        await store.load_session("s1")


@pytest.mark.parametrize("inc", [None, 7, ""])
async def test_a_session_document_without_its_incarnation_is_corrupt(
    mongo_database: AsyncDatabase[Any], sync_db: Any, inc: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"inc": inc}})
    with pytest.raises(CorruptSessionError, match=r"'s1'.*inc"):
        await store.load_entries("s1")
    with pytest.raises(CorruptSessionError, match=r"'s1'.*inc"):
        await MongoStore(mongo_database).append_entries("s1", [entry("a")])


async def test_string_next_seq_raises_corrupt_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A damaged hint is found by the next store object that reads it (the object that created
    the session numbers from what it knows and never reads it)."""
    await MongoStore(mongo_database).create_session("s1")
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": "3"}})
    with pytest.raises(CorruptSessionError, match="'s1'"):
        await MongoStore(mongo_database).append_entries("s1", [entry("a")])
