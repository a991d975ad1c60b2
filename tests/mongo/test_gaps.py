"""MongoStore.load_entries_after while an append is between its slot and its document
(docs/design.md#mongo-store): a read stops before that place and hands out no position past
it, so a seq once read never changes; a place left by a dead writer is fenced by a reader after
``abandon_after``, and the writer's retry stores its batch later."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import AutoReconnect, DuplicateKeyError

from durable_agent.session import Entry, StoreUnavailableError
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo.tail import ABANDON_AFTER
from tests.mongo.helpers import (
    HeldDatabase,
    HeldInsert,
    batch_doc,
    entry,
    ids,
    inc_of,
    keys_of,
    unsettled_slots,
)

pytestmark = pytest.mark.mongo


def numbered(pairs: list[tuple[int, Entry]]) -> list[tuple[int, str]]:
    return [(seq, e.id) for seq, e in pairs]


async def _held_b(
    mongo_database: AsyncDatabase[Any], hold: HeldInsert
) -> tuple[MongoStore, asyncio.Task[None]]:
    """Session s1 with [a] stored, [b] held between its slot (seq 1) and its document, and [c]
    stored after it (seq 2) by another store object."""
    writer = MongoStore(cast(Any, HeldDatabase(mongo_database, hold)))
    await writer.create_session("s1")
    await writer.append_entries("s1", [entry("a")])
    hold.armed = True
    held = asyncio.create_task(writer.append_entries("s1", [entry("b")]))
    await hold.reached.wait()
    await MongoStore(mongo_database).append_entries("s1", [entry("c")])
    return writer, held


async def test_a_read_stops_before_an_append_in_flight(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """[b] has its slot but not its document, [c] after it is stored: a follower gets [a] only
    (c's position is not known yet), again and again; once b lands, b and c at 2 and 3."""
    hold = HeldInsert()
    _, held = await _held_b(mongo_database, hold)
    reader = MongoStore(mongo_database)
    assert ids(await reader.load_entries("s1")) == ["a", "c"]
    for _ in range(2):
        assert numbered(await reader.load_entries_after("s1", 0)) == [(1, "a")]
        assert await reader.load_entries_after("s1", 1) == []
    hold.release.set()
    await held
    assert numbered(await reader.load_entries_after("s1", 1)) == [(2, "b"), (3, "c")]
    assert numbered(await reader.load_entries_after("s1", 0)) == [(1, "a"), (2, "b"), (3, "c")]
    assert ids(await reader.load_entries("s1")) == ["a", "b", "c"]
    assert unsettled_slots(sync_db, "s1") == []


async def test_a_stalled_append_is_fenced_and_lands_later(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A reader that gives up on b's slot at once (``abandon_after=0``) fences b's place and
    reads on: c is 2. The writer, still alive, finds the fence it did not place and stores b in
    a later slot, at 3; what the reader handed out never moves."""
    hold = HeldInsert()
    _, held = await _held_b(mongo_database, hold)
    reader = MongoStore(mongo_database, abandon_after=0)
    assert numbered(await reader.load_entries_after("s1", 0)) == [(1, "a"), (2, "c")]
    hold.release.set()
    await held
    assert numbered(await reader.load_entries_after("s1", 2)) == [(3, "b")]
    assert numbered(await reader.load_entries_after("s1", 0)) == [(1, "a"), (2, "c"), (3, "b")]
    assert ids(await reader.load_entries("s1")) == ["a", "c", "b"]
    assert keys_of(sync_db, "s1") == [["a"], ["c"], ["b"]]
    assert sync_db.entries.find_one({"seq": 1, "session_id": "s1"})["fence"] is True
    assert unsettled_slots(sync_db, "s1") == []


async def test_a_dead_writers_place_is_fenced_and_its_retry_stores_later(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """b's writer dies between its slot and its document. Readers wait for it while the slot is
    young, then one fences its place and reads on; the dead attempt's document can never land
    there, and the retry stores b after c."""
    hold = HeldInsert()
    writer, held = await _held_b(mongo_database, hold)
    hold.fail = AutoReconnect("connection lost")
    hold.release.set()
    with pytest.raises(StoreUnavailableError):
        await held
    patient = MongoStore(mongo_database)
    assert numbered(await patient.load_entries_after("s1", 0)) == [(1, "a")]
    [dead] = unsettled_slots(sync_db, "s1")  # b's slot, neither filled nor fenced
    assert dead.endswith("#1")
    impatient = MongoStore(mongo_database, abandon_after=0)
    assert numbered(await impatient.load_entries_after("s1", 0)) == [(1, "a"), (2, "c")]
    assert numbered(await patient.load_entries_after("s1", 1)) == [(2, "c")]  # settled for all
    late = batch_doc(sync_db, "s1", [entry("b")], 1)
    with pytest.raises(DuplicateKeyError):
        sync_db.entries.insert_one(late)
    await writer.append_entries("s1", [entry("b")])  # the caller's retry
    assert numbered(await patient.load_entries_after("s1", 2)) == [(3, "b")]
    assert ids(await patient.load_entries("s1")) == ["a", "c", "b"]
    assert unsettled_slots(sync_db, "s1") == []


async def test_a_retry_that_stores_nothing_leaves_no_wait(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """An idempotent retry takes a slot and stores nothing: it fences the slot itself, so a
    reader that would wait an hour for an append in flight reads past it at once."""
    store = MongoStore(mongo_database)
    reader = MongoStore(mongo_database, abandon_after=3600)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    await store.append_entries("s1", [entry("a")])  # the retry: a slot, then nothing to store
    await store.append_entries("s1", [entry("c")])
    assert numbered(await reader.load_entries_after("s1", 0)) == [(1, "a"), (2, "c")]
    assert unsettled_slots(sync_db, "s1") == []


async def test_a_gap_inside_a_split_batchs_slot(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A batch split into two documents in slot 1..4: the first is stored, the second not yet.
    The first names its slot, so a reader waits at place 3 while the slot is young, and once it
    is old fences place 3 and goes on at the slot's end, 5."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    inc = inc_of(sync_db, "s1")
    young = datetime.now(UTC)
    for seq, n in ((1, 4), (5, 1)):
        slot = {"_id": f"s1/{inc}#{seq}", "i": inc, "n": n, "t": young}
        sync_db.entries_claims.insert_one(slot)
    split = [entry("b1"), entry("b2")]
    sync_db.entries.insert_one(batch_doc(sync_db, "s1", split, 1, slot=[1, 4]))
    sync_db.entries.insert_one(batch_doc(sync_db, "s1", [entry("c")], 5))
    expected = [(1, "a"), (2, "b1"), (3, "b2")]
    assert numbered(await store.load_entries_after("s1", 0)) == expected
    old = young - timedelta(seconds=ABANDON_AFTER)
    sync_db.entries_claims.update_one({"_id": f"s1/{inc}#1"}, {"$set": {"t": old}})
    assert numbered(await store.load_entries_after("s1", 0)) == [*expected, (4, "c")]
    assert sync_db.entries.find_one({"_id": f"s1/{inc}#3"})["fence"] is True


def test_abandon_after_must_not_be_negative(mongo_database: AsyncDatabase[Any]) -> None:
    with pytest.raises(ValueError, match="abandon_after"):
        MongoStore(mongo_database, abandon_after=-1)
