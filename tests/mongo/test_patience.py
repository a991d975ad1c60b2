"""How long a MongoStore append waits for another writer's entries (docs/design.md#mongo-store):
an append whose entry is claimed by a writer that took its slot after it and then stalled before
its document waits for it as long as a reader would (``abandon_after``), then fences that place
and stores the entry itself; it gives up, retryably, only once its patience (``abandon_after``
plus a margin, on its own clock) has passed, never after a number of rounds."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.session import StoreUnavailableError, encode_entry
from durable_agent.session.appendplan import encode_batch
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo.claims import Claims, claim_doc, slot_doc
from durable_agent.stores.mongo.incarnation import Scope
from durable_agent.stores.mongo.writer import PATIENCE_MARGIN, BatchWriter
from tests.mongo.helpers import MIB, entry, ids, inc_of, keys_of, unsettled_slots

pytestmark = pytest.mark.mongo

#: A short abandon time, so the test waits it out quickly (the old writer gave up after 50
#: rounds of back-off, about 4.4 s, whatever the abandon time).
ABANDON = 0.5


async def test_an_append_outwaits_a_writer_that_stalls_after_claiming_its_entry(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Session s1 holds [a] (slot 0). This append of [x] takes slot 1; another writer took slot
    2 after it, claimed x for its document at 2 first, and stalled (or died) before inserting
    that document: the state left in the database, written here as that writer would. The
    append cannot fence a place after its own first slot at once (that writer may be about to
    insert it), so it waits; once it has waited ``abandon_after`` it fences place 2, as a reader
    would, takes the claim over and stores x in slot 3. The stalled writer's document can never
    land at 2 any more."""
    store = MongoStore(mongo_database, abandon_after=ABANDON)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    scope = Scope("s1", inc_of(sync_db, "s1"))
    sync_db.entries_claims.insert_many(
        [slot_doc(scope, 2, 1), claim_doc(scope, "x", encode_entry(entry("x")), 2)]
    )
    started = time.monotonic()
    await store.append_entries("s1", [entry("x")])
    assert time.monotonic() - started >= ABANDON  # it waited for the stalled writer first
    assert ids(await store.load_entries("s1")) == ["a", "x"]
    assert keys_of(sync_db, "s1") == [["a"], ["x"]]
    assert sync_db.entries.find_one({"_id": scope.at(2)})["fence"] is True
    x_doc = sync_db.entries.find_one({"entry_id": "x"})
    assert x_doc["seq"] == 3
    assert sync_db.entries_claims.find_one({"_id": scope.key("x")})["q"] == 3
    assert unsettled_slots(sync_db, "s1") == []
    reader = MongoStore(mongo_database, abandon_after=3600)
    assert [(n, e.id) for n, e in await reader.load_entries_after("s1", 0)] == [(1, "a"), (2, "x")]


async def test_an_append_that_nothing_settles_gives_up_after_its_patience(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A claim of x points at a place no document of it can land on and no fence can go in: a
    hand-made document holds that seq under another ``_id`` (damage no writer leaves: nothing
    ever settles it). The append keeps looking until its clock, injected
    here and advanced one second per reading, has passed ``abandon_after`` plus the margin, then
    raises ``StoreUnavailableError`` saying so, and stores nothing."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    scope = Scope("s1", inc_of(sync_db, "s1"))
    elsewhere = {"_id": "elsewhere", "session_id": "s1", "inc": scope.inc, "seq": 5}
    sync_db.entries.insert_one({**elsewhere, "keys": [], "wires": []})
    sync_db.entries_claims.insert_one(claim_doc(scope, "x", encode_entry(entry("x")), 5))
    readings: list[float] = []

    def clock() -> float:
        readings.append(float(len(readings)))
        return readings[-1]

    collection = mongo_database.get_collection
    writer = BatchWriter(
        collection("sessions"),
        collection("entries"),
        Claims(collection("entries_claims"), collection("sessions")),
        abandon_after=5.0,
        clock=clock,
    )
    patience = 5.0 + PATIENCE_MARGIN
    with pytest.raises(StoreUnavailableError, match=f"gave up after {patience:g} s") as info:
        await writer.write("s1", encode_batch("s1", [entry("x")], limit=MIB))
    assert "s1" in str(info.value)
    assert readings[0] + patience <= readings[-1] <= readings[0] + patience + 2
    assert ids(await store.load_entries("s1")) == ["a"]
    assert unsettled_slots(sync_db, "s1") == []
