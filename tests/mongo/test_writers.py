"""MongoStore appends: a slot-and-claims insert, a document insert and a confirming read per new
batch, idempotent retries, conflicts that leave nothing, and concurrent writers refereed by claims
and slots (docs/design.md#mongo-store)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.session import Entry, EntryConflictError, SessionExistsError, encode_entry
from durable_agent.stores.mongo import MongoStore
from tests.mongo.helpers import (
    MIB,
    Commands,
    assert_writer_orders,
    claim_ids,
    elsewhere,
    entry,
    ids,
    keys_of,
    unsettled_slots,
)
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS

pytestmark = pytest.mark.mongo


# --- one writer -----------------------------------------------------------------------------


async def test_new_batch_is_two_inserts_and_a_confirming_read(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """No lookup and no counter for a batch of new IDs: one insert of its slot and claims, one
    of its document, then a read of the session document by ``_id`` (still there, still the
    same incarnation); a batch with a stored ID looks it up and writes the rest."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.create_session("s1")
    for size in (1, 10):
        commands.log.clear()
        await store.append_entries("s1", [entry(f"n{size}-{k}") for k in range(size)])
        assert commands.names() == ["insert", "insert", "find"]
        assert commands.log[-1][1]["filter"] == {"_id": "s1"}
    commands.log.clear()
    await store.append_entries("s1", [entry("n1-0"), entry("more")])
    assert "find" in commands.names()
    assert ids(await store.load_entries("s1")) == [
        "n1-0", *(f"n10-{k}" for k in range(10)), "more"
    ]  # fmt: skip


async def test_fresh_store_walks_the_slots_and_moves_the_hint(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object that never saw the session starts at the session's ``next_seq`` hint,
    follows the taken slots to the end (its batch lands after all of them) and, after a long
    walk, moves the hint there, so the next newcomer starts near the end."""
    writer = MongoStore(mongo_database)
    await writer.create_session("s1")
    for k in range(20):
        await writer.append_entries("s1", [entry(f"w{k}-{i}") for i in range(k % 3 + 1)])
    end = sum(k % 3 + 1 for k in range(20))
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == 0
    await MongoStore(mongo_database).append_entries("s1", [entry("late")])
    assert sync_db.sessions.find_one({"_id": "s1"})["next_seq"] == end
    assert sync_db.entries.find_one({"session_id": "s1", "entry_id": "late"})["seq"] == end
    await writer.append_entries("s1", [entry("after")])  # its end is behind: walks one slot
    loaded = ids(await MongoStore(mongo_database).load_entries("s1"))
    assert loaded[-2:] == ["late", "after"] and len(loaded) == end + 2


async def test_fresh_store_appends_a_large_batch_behind_a_taken_slot(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object that never loaded the session tries its first slot, 0, which is taken,
    with the batch's claims in the same ordered insert. FerretDB goes on past the taken slot
    with its next internal batch of 100 documents, so claims of this batch are left pointing at
    the first append's document, which does not hold them: they are dead (no document can land
    there any more), and the append takes them over instead of waiting for them until it gives
    up (a retry gave up too: those IDs could never be stored)."""
    await MongoStore(mongo_database).create_session("s1")
    await MongoStore(mongo_database).append_entries("s1", [entry("first")])
    batch = [entry(f"e{i}", parent="first" if i == 0 else f"e{i - 1}") for i in range(150)]
    fresh = MongoStore(mongo_database, abandon_after=0.5)
    await fresh.append_entries("s1", batch)
    await MongoStore(mongo_database).append_entries("s1", batch)  # a repeat is a no-op
    assert ids(await MongoStore(mongo_database).load_entries("s1")) == ["first", *ids(batch)]
    assert keys_of(sync_db, "s1") == [["first"], ids(batch)]
    assert unsettled_slots(sync_db, "s1") == []


async def test_overlapping_retry_stores_only_the_new_entry(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """[b, c] after [a, b]: b is claimed and stored, so only c is written, after b."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b")])
    for retry in (store, MongoStore(mongo_database)):
        await retry.append_entries("s1", [entry("b"), entry("c")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c"]
    assert keys_of(sync_db, "s1") == [["a", "b"], ["c"]]
    assert claim_ids(sync_db, "s1") == {"a", "b", "c"}


async def test_partial_overlap_retry_stores_only_the_rest(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b"), entry("c")])
    await store.append_entries("s1", [entry("b"), entry("d")])  # b stored, not first in its doc
    await store.append_entries("s1", [entry("x"), entry("c"), entry("a"), entry("y")])
    assert ids(await store.load_entries("s1")) == ["a", "b", "c", "d", "x", "y"]
    assert keys_of(sync_db, "s1") == [["a", "b", "c"], ["d"], ["x", "y"]]


async def test_conflict_on_any_position_writes_nothing(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
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
    assert sync_db.entries.count_documents({"fence": {"$ne": True}}) == 1
    assert unsettled_slots(sync_db, "s1") == []  # the failed batches' slots are fenced
    assert claim_ids(sync_db, "s1") == {"a", "b"}  # the failed batches' claims released
    await store.append_entries("s1", [entry("n1"), entry("n2")])  # so n1 and n2 are free
    assert ids(await store.load_entries("s1")) == ["a", "b", "n1", "n2"]


async def test_entries_another_store_object_stored_are_skipped_or_conflict(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Another store object stored ``b`` first: the rest of the batch goes in after it. A
    stored entry with other content is a conflict, and nothing of that batch stays."""
    ours = MongoStore(mongo_database)
    other = MongoStore(mongo_database)
    await ours.create_session("s1")
    await other.append_entries("s1", [entry("b")])
    await ours.append_entries("s1", [entry("a"), entry("b"), entry("c")])
    assert ids(await ours.load_entries("s1")) == ["b", "a", "c"]

    await other.append_entries("s1", [entry("z", "theirs")])
    with pytest.raises(EntryConflictError) as info:
        await ours.append_entries("s1", [entry("y"), entry("y2"), entry("z", "ours"), entry("w")])
    assert info.value.entry_id == "z"
    loaded = {e.id: encode_entry(e) for e in await ours.load_entries("s1")}
    assert sorted(loaded) == ["a", "b", "c", "z"]
    assert loaded["z"] == encode_entry(entry("z", "theirs"))
    assert claim_ids(sync_db, "s1") == {"a", "b", "c", "z"}


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


async def test_split_batch_conflict_found_late_rolls_back(
    client_factory: Any, mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A split batch whose second document is fenced: another writer (another process, the
    moment this call's claims are in) found ``b2`` claimed but not stored, fenced its document
    and stored its own ``b2``. The first document, already inserted, is deleted again with the
    call's claims, and the call raises the conflict, so nothing of the batch stays."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.create_session("s1")
    rival: list[object] = []

    async def store_rival(other: MongoStore) -> None:
        await other.append_entries("s1", [entry("b2", "rival")])

    commands.log.clear()
    commands.arm(
        lambda: rival.append(elsewhere(mongo_uri, mongo_database.name, store_rival)),
        after="insert",
    )
    batch = [entry(f"b{i}", chr(ord("a") + i) * (6 * MIB)) for i in range(3)]
    with pytest.raises(EntryConflictError) as info:
        await store.append_entries("s1", batch)
    assert rival == [None]
    assert info.value.entry_id == "b2"
    assert commands.names()[:2] == ["insert", "insert"]  # claims, then the two documents
    assert keys_of(sync_db, "s1") == [["b2"]]
    assert claim_ids(sync_db, "s1") == {"b2"}  # the rival's
    [stored] = await MongoStore(mongo_database).load_entries("s1")
    assert encode_entry(stored) == encode_entry(entry("b2", "rival"))


# --- concurrent writers ---------------------------------------------------------------------


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


def _disjoint_seqs(sync_db: Any, sid: str) -> None:
    """Every document's numbers ``seq .. seq + len - 1`` are its own."""
    docs = sync_db.entries.find({"session_id": sid, "fence": {"$exists": False}})
    spans = [(d["seq"], len(d["keys"])) for d in docs]
    numbers = [seq + i for seq, n in spans for i in range(n)]
    assert len(numbers) == len(set(numbers))


async def test_two_stores_on_separate_clients(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    a = MongoStore(client_factory()[mongo_database.name])
    b = MongoStore(client_factory()[mongo_database.name])
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
    _disjoint_seqs(sync_db, "s1")


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


async def _race(stores: Sequence[MongoStore], sid: str, plan: Sequence[Sequence[Entry]]) -> Any:
    """Every store appends its batch of ``plan`` at once; the outcomes, in order."""
    go = asyncio.Event()

    async def write(store: MongoStore, batch: Sequence[Entry]) -> None:
        await go.wait()
        await store.append_entries(sid, batch)

    tasks = [asyncio.create_task(write(s, b)) for s, b in zip(stores, plan, strict=True)]
    go.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_loser_of_a_conflicting_race_leaves_nothing(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Two clients race batches that share the ID ``x`` with different content. The first
    writer of ``x`` wins and its whole batch is stored; the other raises
    ``EntryConflictError`` and nothing of its batch stays, not even its claims. Repeated on
    fresh sessions, so the interleavings vary."""
    a = MongoStore(client_factory()[mongo_database.name])
    b = MongoStore(client_factory()[mongo_database.name])
    batches = {
        "a": [entry("a0"), entry("a1", parent="a0"), entry("x", "from a"), entry("a2")],
        "b": [entry("b0"), entry("x", "from b"), entry("b1", parent="x")],
    }
    for r in range(12):
        sid = f"race{r}"
        await a.create_session(sid)
        outcome = dict(zip("ab", await _race((a, b), sid, list(batches.values())), strict=True))
        [winner] = [name for name, res in outcome.items() if res is None]
        [loser] = [name for name, res in outcome.items() if res is not None]
        failure = outcome[loser]
        assert isinstance(failure, EntryConflictError) and failure.entry_id == "x"
        stored = await a.load_entries(sid)
        assert ids(stored) == ids(batches[winner])  # all of the winner's, none of the loser's
        [x] = [e for e in stored if e.id == "x"]
        assert encode_entry(x) == encode_entry(entry("x", f"from {winner}"))
        assert ids(await b.load_entries(sid)) == ids(stored)
        assert claim_ids(sync_db, sid) == set(ids(batches[winner]))


async def test_retries_and_a_conflicting_writer_race(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Three copies of batch A, one batch B that gives ``x`` other content, and two copies of an
    unrelated batch C race on six clients. Each batch is all-or-nothing: either every copy of A
    succeeds and nothing of B is stored, or B succeeds and nothing of A is; C always lands."""
    stores = [MongoStore(client_factory()[mongo_database.name]) for _ in range(6)]
    a = [entry("a0"), entry("a1", parent="a0"), entry("a2"), entry("a3"), entry("x", "A")]
    b = [entry("b0"), entry("x", "B"), entry("b1")]
    c = [entry(f"c{i}") for i in range(5)]
    for r in range(8):
        sid = f"mix{r}"
        await stores[0].create_session(sid)
        res = await _race(stores, sid, [a, b, a, a, c, c])
        assert all(x is None or isinstance(x, EntryConflictError) for x in res), res
        assert res[4] is None and res[5] is None
        a_won = res[1] is not None
        assert [res[i] is None for i in (0, 2, 3)] == [a_won] * 3
        winner = a if a_won else b
        loaded = ids(await stores[1].load_entries(sid))
        assert sorted(loaded) == sorted(ids(winner) + ids(c))
        for batch in (winner, c):
            assert [eid for eid in loaded if eid in ids(batch)] == ids(batch)
        _disjoint_seqs(sync_db, sid)


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
        a, b = (MongoStore(c[mongo_database.name]) for c in clients)
        await a.create_session("s1")
        await b.load_entries("s1")
        for k in range(15):
            batch = [entry(f"e{k}-{i}") for i in range(k % 4 + 1)]
            await asyncio.gather(a.append_entries("s1", batch), b.append_entries("s1", batch))
    finally:
        for client in clients:
            await client.close()
    expected = [f"e{k}-{i}" for k in range(15) for i in range(k % 4 + 1)]
    stored = [eid for keys in keys_of(sync_db, "s1") for eid in keys]
    assert stored == expected  # one copy of each, in order
    assert ids(await MongoStore(mongo_database).load_entries("s1")) == expected


async def test_concurrent_writers_of_different_batches_keep_each_order(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """Two store objects append their own batches at once: nothing is lost, and each writer's
    batches read back in the order it wrote them (the slots referee the numbers)."""
    stores = [MongoStore(client_factory()[mongo_database.name]) for _ in range(2)]
    await stores[0].create_session("s1")

    async def writer(n: int) -> None:
        for k in range(20):
            await stores[n].append_entries("s1", [entry(f"w{n}-{k}-{i}") for i in range(2)])

    await asyncio.gather(writer(0), writer(1))
    loaded = ids(await MongoStore(mongo_database).load_entries("s1"))
    for n in range(2):
        assert [e for e in loaded if e.startswith(f"w{n}-")] == [
            f"w{n}-{k}-{i}" for k in range(20) for i in range(2)
        ]
    assert len(loaded) == 80


# --- guarded appends (a person's decision, a fork's copy) ---------------------------------


def held_insert(store: MongoStore) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold ``store``'s next batch-document insert after its slot and claims went in (a writer
    in flight); returns (placed, go)."""
    placed, go = asyncio.Event(), asyncio.Event()
    insert = store._writer._insert

    async def in_flight(docs: list[dict[str, Any]]) -> None:
        store._writer._insert = insert  # type: ignore[method-assign]
        placed.set()
        await go.wait()
        await insert(docs)

    store._writer._insert = in_flight  # type: ignore[method-assign]
    return placed, go


@pytest.mark.parametrize("first_lands", [True, False])
async def test_exclusive_append_settles_a_writer_in_flight_before_it(
    mongo_database: AsyncDatabase[Any], sync_db: Any, first_lands: bool
) -> None:
    """Two processes copy different paths at once. The first took its slot and claims and
    checked nothing was before it; its document is in flight when the second checks. Landed
    by then: the second is refused. Not yet: the second fences its place at once (a slot
    taken before its own) and lands; the first finds the fence, moves to a later slot, checks
    again and is refused. Either way one path is stored, nothing of the other, no slot left
    open for a reader to wait on."""
    first, second = MongoStore(mongo_database), MongoStore(mongo_database)
    await first.create_session("s1")
    left = [entry("l0"), entry("l1", parent="l0")]
    right = [entry("r0")]
    placed, go = held_insert(first)
    held = asyncio.create_task(first.append_if_last("s1", left, None))
    await placed.wait()
    if first_lands:
        go.set()
        assert await held is True
    assert await second.append_if_last("s1", right, None) is (not first_lands)
    go.set()
    assert await held is first_lands
    assert ids(await second.load_entries("s1")) == ids(left if first_lands else right)
    assert unsettled_slots(sync_db, "s1") == []
    assert claim_ids(sync_db, "s1") == set(ids(left if first_lands else right))  # none stays


@pytest.mark.parametrize("first_lands", [True, False])
async def test_two_decisions_on_one_leaf_at_once_store_one(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any, first_lands: bool
) -> None:
    """Two processes decide two calls of one parked turn at once, each after leaf ``L``. The
    first's decision is in flight (slot and claims taken, checked) when the second checks.
    Landed by then: the second is refused. Not yet: the second fences its place and lands, and
    the first, moved to a later slot, finds the second's decision after ``L`` and is refused.
    Either way ``L`` then one decision, never two siblings of which the path shows one."""
    first, second = (MongoStore(client_factory()[mongo_database.name]) for _ in range(2))
    await first.create_session("s1")
    await first.append_entries("s1", [entry("L")])
    await second.load_entries("s1")
    mine, theirs = [entry("d1", parent="L")], [entry("d2", parent="L")]
    placed, go = held_insert(first)
    held = asyncio.create_task(first.append_if_last("s1", mine, "L"))
    await placed.wait()
    if first_lands:
        go.set()
        assert await held is True
    assert await second.append_if_last("s1", theirs, "L") is (not first_lands)
    go.set()
    assert await held is first_lands
    assert ids(await MongoStore(mongo_database).load_entries("s1")) == [
        "L",
        "d1" if first_lands else "d2",
    ]
    assert unsettled_slots(sync_db, "s1") == []
    assert claim_ids(sync_db, "s1") == {"L", "d1" if first_lands else "d2"}  # none stays


async def test_a_guarded_append_sees_another_writers_append_before_it(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object whose view ends at ``L`` is refused once another process appended after
    ``L``, and lands when it names that append as the last entry."""
    first, second = (MongoStore(client_factory()[mongo_database.name]) for _ in range(2))
    await first.create_session("s1")
    await first.append_entries("s1", [entry("L")])
    await second.append_if_last("s1", [entry("d1", parent="L")], "L")
    assert await first.append_if_last("s1", [entry("d2", parent="L")], "L") is False
    assert await first.append_if_last("s1", [entry("d2", parent="d1")], None) is False
    assert await first.append_if_last("s1", [entry("d2", parent="d1")], "d1") is True
    assert ids(await first.load_entries("s1")) == ["L", "d1", "d2"]
    assert claim_ids(sync_db, "s1") == {"L", "d1", "d2"}
    assert unsettled_slots(sync_db, "s1") == []


async def test_a_guarded_batch_stored_already_answers_by_what_came_after_it(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A repeat of a guarded batch that landed is ``True`` (its last entry before it is still
    the one named); once another entry is stored after it, ``False``, nothing written."""
    store, other = MongoStore(mongo_database), MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("L")])
    decision = [entry("d1", parent="L")]
    assert await store.append_if_last("s1", decision, "L") is True
    for retry in (store, other):
        assert await retry.append_if_last("s1", decision, "L") is True
    assert await store.append_if_last("s1", [], "d1") is True
    assert await store.append_if_last("s1", [], "L") is False
    await other.append_entries("s1", [entry("next", parent="d1")])
    for retry in (store, other):
        assert await retry.append_if_last("s1", decision, "L") is False
    assert await store.append_if_last("s1", [], "d1") is False
    assert await store.append_if_last("s1", [*decision, entry("d2", parent="d1")], "L") is False
    assert ids(await store.load_entries("s1")) == ["L", "d1", "next"]
    assert claim_ids(sync_db, "s1") == {"L", "d1", "next"}
    assert unsettled_slots(sync_db, "s1") == []
