"""MongoStore.load_entries_after: the entries after a sequence number, each with its seq (its
1-based position in append order), reading only what follows it (docs/design.md#mongo-store)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.session import CorruptSessionError, Entry, SessionNotFoundError, encode_entry
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo.decode import OUTLINE_PROJECTION
from tests.mongo.helpers import Commands, batch_doc, entry, ids, inc_of

pytestmark = pytest.mark.mongo

BATCHES = [["a", "b", "c"], ["d"], ["e", "f"], ["g", "h", "i", "j"]]
ALL = [eid for batch in BATCHES for eid in batch]


async def _session(store: MongoStore, sid: str = "s1") -> None:
    await store.create_session(sid)
    for batch in BATCHES:
        await store.append_entries(sid, [entry(eid) for eid in batch])


def numbered(pairs: list[tuple[int, Entry]]) -> list[tuple[int, str]]:
    return [(seq, e.id) for seq, e in pairs]


async def test_after_every_position(mongo_database: AsyncDatabase[Any]) -> None:
    """After 0 is the whole log numbered from 1, as ``load_entries`` orders it; after the middle
    of a batch, its end, or the last entry, exactly what follows; past the end, nothing."""
    store = MongoStore(mongo_database)
    await _session(store)
    every = await store.load_entries_after("s1", 0)
    assert numbered(every) == list(enumerate(ALL, 1))
    assert [encode_entry(e) for _, e in every] == [
        encode_entry(e) for e in await store.load_entries("s1")
    ]
    for after in range(len(ALL) + 3):
        got = numbered(await MongoStore(mongo_database).load_entries_after("s1", after))
        assert got == list(enumerate(ALL, 1))[after:], after


async def test_unknown_session_and_bad_after(mongo_database: AsyncDatabase[Any]) -> None:
    store = MongoStore(mongo_database)
    with pytest.raises(SessionNotFoundError):
        await store.load_entries_after("nope", 0)
    await store.create_session("empty")
    assert await store.load_entries_after("empty", 0) == []
    assert await store.load_entries_after("empty", 5) == []
    for bad in (-1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="after"):
            await store.load_entries_after("empty", bad)  # type: ignore[arg-type]


async def test_seqs_are_positions_across_gaps(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Stored ``seq`` numbers have gaps (a retry that stored nothing new, a crashed writer's
    slot); the seqs of a read after are positions all the same."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b")])
    await store.append_entries("s1", [entry("b"), entry("c")])  # b stored: a slot goes unused
    inc = inc_of(sync_db, "s1")
    slot = {"_id": f"s1/{inc}#20", "i": inc, "n": 3}
    sync_db.entries_claims.insert_one(slot)  # a crashed writer's
    sync_db.sessions.update_one({"_id": "s1"}, {"$set": {"next_seq": 20}})
    await MongoStore(mongo_database).append_entries("s1", [entry("d"), entry("e")])
    stored = [d["seq"] for d in sync_db.entries.find({"session_id": "s1"}).sort("seq", 1)]
    assert stored[-1] > 4  # the gaps are there
    assert numbered(await store.load_entries_after("s1", 2)) == [(3, "c"), (4, "d"), (5, "e")]
    assert numbered(await store.load_entries_after("s1", 3)) == [(4, "d"), (5, "e")]


async def test_reads_only_the_documents_after_the_seq(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """One ``find`` of every document's ``seq`` and keys (no entry bodies), alongside the
    session check; then the documents holding later entries, by ``_id``."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await _session(store)
    commands.log.clear()
    assert numbered(await store.load_entries_after("s1", 5)) == list(enumerate(ALL, 1))[5:]
    finds = [body for name, body in commands.log if name == "find"]
    scans = [body for body in finds if body["filter"] == {"session_id": "s1"}]
    assert [body["projection"] for body in scans] == [OUTLINE_PROJECTION]
    by_id = [body["filter"]["_id"] for body in finds if "_id" in body["filter"]]
    p = f"s1/{inc_of(sync_db, 's1')}"
    assert sorted(by_id) == ["s1", f"{p}#4", f"{p}#6"]  # the session; f's and g's documents


async def test_many_documents_after_the_seq(mongo_database: AsyncDatabase[Any]) -> None:
    """More documents than the point-lookup limit after the seq are read with one query."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    for k in range(45):
        await store.append_entries("s1", [entry(f"e{k:02d}")])
    got = numbered(await store.load_entries_after("s1", 3))
    assert got == [(k + 1, f"e{k:02d}") for k in range(3, 45)]


async def test_a_limit_fetches_only_the_documents_of_the_page(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A page reads the documents holding its entries, no later one: by ``_id`` (the last one
    split by the limit, g of g..j), or, past the point-lookup limit, one query bounded by the
    page's last document."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await _session(store)
    commands.log.clear()
    assert numbered(await store.load_entries_after("s1", 4, 3)) == [(5, "e"), (6, "f"), (7, "g")]
    by_id = [b["filter"]["_id"] for n, b in commands.log if n == "find" and "_id" in b["filter"]]
    p = f"s1/{inc_of(sync_db, 's1')}"
    assert sorted(by_id) == ["s1", f"{p}#4", f"{p}#6"]  # e..f's and g..j's documents
    await store.create_session("s2")
    for k in range(60):
        await store.append_entries("s2", [entry(f"e{k:02d}")])
    commands.log.clear()
    got = numbered(await store.load_entries_after("s2", 3, 40))
    assert got == [(k + 1, f"e{k:02d}") for k in range(3, 43)]
    ranged = [b["filter"]["seq"] for n, b in commands.log if n == "find" and "seq" in b["filter"]]
    assert ranged == [{"$gte": 3, "$lte": 42}]


async def test_an_id_stored_twice_reads_as_a_load_does(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Two batches sharing an ID, both stored (the writers never do it; a foreign or
    hand-edited document might): an identical copy is counted once, as ``load_entries``
    returns it; a differing one is a typed error."""
    store = MongoStore(mongo_database)
    for sid, shared in (("same", entry("x")), ("diff", entry("x", "other"))):
        await store.create_session(sid)
        await store.append_entries(sid, [entry("a"), entry("x")])
        sync_db.entries.insert_one(batch_doc(sync_db, sid, [entry("b"), shared, entry("c")], 10))
    assert numbered(await store.load_entries_after("same", 1)) == [(2, "x"), (3, "b"), (4, "c")]
    with pytest.raises(CorruptSessionError, match="'x' is stored twice"):
        await store.load_entries_after("diff", 2)


async def test_a_document_gone_meanwhile_reads_as_a_load_does(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A document counted by the first read and deleted before its fetch (a hand edit; a
    conflicting batch rolling back its split documents fences them): the read starts over, so
    the seqs it returns are positions in what is stored."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    doomed = batch_doc(sync_db, "s1", [entry("doomed")], 5)
    sync_db.entries.insert_one(doomed)
    await store.append_entries("s1", [entry("b")])
    commands.arm_before(
        lambda: sync_db.entries.delete_one({"_id": doomed["_id"]}),
        when=lambda body: body.get("filter") == {"_id": doomed["_id"]},
    )
    commands.log.clear()
    assert numbered(await store.load_entries_after("s1", 1)) == [(2, "b")]
    scans = [b["projection"] for n, b in commands.log if b.get("filter") == {"session_id": "s1"}]
    assert scans == [OUTLINE_PROJECTION, OUTLINE_PROJECTION]
    assert ids(await store.load_entries("s1")) == ["a", "b"]
