"""Deleted means deleted on MongoStore (docs/design.md#retention, docs/design.md#mongo-store).

Appends racing a delete from another process, a delete that died half-way, a store object that
knew the session before another one deleted and created it again, and two writers racing one
entry ID with different content on a server that does not enforce the multikey unique index
(FerretDB). "Another process" is a store object on a client and event loop of its own, run from
a command hook of the first client, so the interleaving is exact.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from rich.console import Console

from durable_agent.cli.config import NotFound
from durable_agent.cli.sessions import remove_session
from durable_agent.session import EntryConflictError, SessionNotFoundError, encode_entry
from durable_agent.session.deltas import Delta, DeltaKey
from durable_agent.stores.mongo import MongoStore
from tests.mongo.helpers import Commands, elsewhere, entry, ids, inc_of, of_session

pytestmark = pytest.mark.mongo


def leftovers(sync_db: Any, sid: str) -> dict[str, int]:
    """What the database still holds of session ``sid``, by collection (none counted: gone)."""
    counts = {
        "sessions": sync_db.sessions.count_documents({"_id": sid}),
        "entries": sync_db.entries.count_documents({"session_id": sid}),
        "claims": sync_db.entries_claims.count_documents(of_session(sid)),
        "live_deltas": sync_db.live_deltas.count_documents({"k": {"$regex": f"^{sid}/"}}),
    }
    return {name: n for name, n in counts.items() if n}


async def test_an_append_after_a_completed_delete_elsewhere_is_refused(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object that saw the session a moment ago appends after another object deleted
    it: ``SessionNotFoundError``, nothing left behind, and the ID created again is empty."""
    writer, other = MongoStore(mongo_database), MongoStore(mongo_database)
    await writer.create_session("s1")
    await writer.append_entries("s1", [entry("a")])
    await other.delete_session("s1")
    with pytest.raises(SessionNotFoundError):
        await writer.append_entries("s1", [entry("b", parent="a")])
    assert leftovers(sync_db, "s1") == {}
    await other.create_session("s1")
    assert await writer.load_entries("s1") == []
    assert await other.load_entries("s1") == []


@pytest.mark.parametrize("inserts", [1, 2])
async def test_an_append_racing_a_delete_is_refused_and_leaves_nothing(
    client_factory: Any, mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any,
    inserts: int,
) -> None:  # fmt: skip
    """Another process deletes the session while an append is between its writes (after its
    claims went in, or after its batch document did): the append raises
    ``SessionNotFoundError``, nothing is left, a second delete finds no session, and the ID
    created again starts empty."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a")])
    deleted: list[object] = []

    def delete() -> None:
        deleted.append(elsewhere(mongo_uri, mongo_database.name, lambda s: s.delete_session("s1")))

    if inserts == 1:
        commands.arm(delete, after="insert")
    else:
        commands.arm(lambda: commands.arm(delete, after="insert"), after="insert")
    with pytest.raises(SessionNotFoundError):
        await store.append_entries("s1", [entry("b", parent="a"), entry("c", parent="b")])
    assert deleted == [None], deleted  # the delete ran, in the middle of the append
    assert leftovers(sync_db, "s1") == {}
    with pytest.raises(SessionNotFoundError):
        await store.delete_session("s1")
    await store.create_session("s1")
    assert await store.load_entries("s1") == []
    assert await MongoStore(mongo_database).load_entries("s1") == []


async def test_delete_finishes_a_half_deleted_session(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A delete that died after removing the session document left entries and claims behind:
    deleting again (the session is not found: its record is gone) removes them, and the ID
    created again never loads them."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b", parent="a")])
    sync_db.sessions.delete_one({"_id": "s1"})  # the delete's first step, then it died
    assert "entries" in leftovers(sync_db, "s1")
    with pytest.raises(SessionNotFoundError):
        await store.delete_session("s1")
    assert leftovers(sync_db, "s1") == {}
    await store.create_session("s1")
    assert await MongoStore(mongo_database).load_entries("s1") == []


async def test_sessions_rm_finishes_a_half_deleted_session(
    mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """``durable-agent sessions rm`` after a delete that died half-way (its record gone, its
    entries not) says there is no such session, as the store does, and removes the leftovers,
    as the store's delete does: otherwise the CLI could never finish the job."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b", parent="a")])
    sync_db.sessions.delete_one({"_id": "s1"})  # the delete's first step, then it died
    spec = mongo_uri.replace("/?", f"/{mongo_database.name}?", 1)
    assert mongo_database.name in spec
    with pytest.raises(NotFound, match="no session 's1'"):
        await remove_session(
            Console(file=io.StringIO()), "s1", spec, yes=True, confirm=lambda _: True
        )
    assert leftovers(sync_db, "s1") == {}


async def test_a_half_deleted_sessions_leftovers_never_reach_its_successor(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """The ID is created again before anyone finished the delete: the new session loads none
    of the old entries, stores the same IDs with new content, and its own delete removes both."""
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.append_entries("s1", [entry("a"), entry("b", parent="a")])
    sync_db.sessions.delete_one({"_id": "s1"})
    fresh = MongoStore(mongo_database)
    await fresh.create_session("s1")
    assert await fresh.load_entries("s1") == []
    await fresh.append_entries("s1", [entry("b", "new b")])
    [b] = await store.load_entries("s1")
    assert encode_entry(b) == encode_entry(entry("b", "new b"))
    assert [e.id for _, e in await store.load_entries_after("s1", 0)] == ["b"]
    await store.delete_session("s1")
    assert leftovers(sync_db, "s1") == {}


async def test_a_conflict_found_in_a_deleted_session_is_session_not_found(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """A store object that knew the session appends after its delete and meets, in the deleted
    incarnation, an entry another racing writer stored there with other content: the session is
    gone, so ``SessionNotFoundError`` (not a conflict), and nothing is left."""
    stale = MongoStore(mongo_database)
    await stale.create_session("s1")
    p = f"s1/{inc_of(sync_db, 's1')}"
    await MongoStore(mongo_database).delete_session("s1")
    racer = {"_id": f"{p}#5", "session_id": "s1", "inc": p[3:], "entry_id": "d", "seq": 5}
    sync_db.entries.insert_one({**racer, "keys": [f"{p}/d"], "wires": [encode_entry(entry("d"))]})
    sync_db.entries_claims.insert_one({"_id": f"{p}/d", "i": p[3:], "q": 5})
    with pytest.raises(SessionNotFoundError):
        await stale.append_entries("s1", [entry("d", "other")])
    assert leftovers(sync_db, "s1") == {}


async def test_a_delete_racing_a_create_spares_the_new_session(
    client_factory: Any, mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """The session is created again (and written) by another process right after a delete
    removed its document, while the delete is still removing the old entries: the new
    session's entries survive."""
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.create_session("s1")
    await store.append_entries("s1", [entry("old")])

    async def recreate(other: MongoStore) -> None:
        await other.create_session("s1")
        await other.append_entries("s1", [entry("new")])

    done: list[object] = []
    commands.arm_before(
        lambda: done.append(elsewhere(mongo_uri, mongo_database.name, recreate)),
        when=lambda body: body.get("delete") == "entries",  # the session document is gone
    )
    await store.delete_session("s1")
    assert done == [None]
    assert ids(await MongoStore(mongo_database).load_entries("s1")) == ["new"]


async def test_a_delete_removes_the_sessions_live_deltas(
    mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    await store.create_session("s10")
    for sid in ("s1", "s10"):
        await store.live_deltas().publish(DeltaKey(sid, "run", 1), Delta(attempt=1, seq=1))
    await MongoStore(mongo_database).delete_session("s1")
    assert leftovers(sync_db, "s1") == {}
    assert await store.live_deltas().read(DeltaKey("s10", "run", 1)) != []


async def test_a_stale_object_appends_in_order_after_a_delete_and_create_elsewhere(
    mongo_database: AsyncDatabase[Any],
) -> None:
    """A store object that knew the deleted session's end appends to the session created again
    under its ID: its entry lands where the appends put it, not at the old end."""
    old, other = MongoStore(mongo_database), MongoStore(mongo_database)
    await old.create_session("s1")
    await old.append_entries("s1", [entry(f"old{i}") for i in range(5)])
    await other.delete_session("s1")
    await other.create_session("s1")
    await other.append_entries("s1", [entry("n1")])
    await old.append_entries("s1", [entry("n2", parent="n1")])
    await other.append_entries("s1", [entry("n3", parent="n2")])
    for reader in (old, other, MongoStore(mongo_database)):
        assert ids(await reader.load_entries("s1")) == ["n1", "n2", "n3"]
        assert [e.id for _, e in await reader.load_entries_after("s1", 1)] == ["n2", "n3"]


async def test_two_writers_of_one_id_with_different_content_first_stored_wins(
    client_factory: Any, mongo_uri: str, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Writer X claimed ``x`` and is about to insert its batch when writer Y (another process)
    appends a batch holding ``x`` with other content: exactly one of them succeeds, the other
    raises ``EntryConflictError`` and stores nothing, and the session stays readable (FerretDB
    does not enforce the unique multikey index, so the database alone cannot referee)."""
    commands = Commands()
    x_store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await x_store.create_session("s1")
    x_batch = [entry("x0"), entry("x", "from X"), entry("x1", parent="x")]
    y_batch = [entry("y0"), entry("x", "from Y")]
    y_outcome: list[object] = []

    async def y_appends(store: MongoStore) -> None:
        await store.append_entries("s1", y_batch)

    commands.arm(
        lambda: y_outcome.append(elsewhere(mongo_uri, mongo_database.name, y_appends)),
        after="insert",  # X's slot and claims are in, its batch document not yet
    )
    x_outcome: object = None
    try:
        await x_store.append_entries("s1", x_batch)
    except EntryConflictError as exc:
        x_outcome = exc
    outcomes = {"X": x_outcome, "Y": y_outcome[0]}
    assert sorted(type(o).__name__ for o in outcomes.values()) == [
        "EntryConflictError",
        "NoneType",
    ], outcomes
    winner = x_batch if outcomes["X"] is None else y_batch
    loaded = await MongoStore(mongo_database).load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(e) for e in winner]
    assert ids(await x_store.load_entries("s1")) == ids(winner)
