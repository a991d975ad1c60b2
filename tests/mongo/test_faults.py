"""MongoStore under cancellation and a server that goes away (docs/design.md#mongo-store):
a started write completes, a failed append leaves its whole batch or nothing, and a retry after
the server comes back completes it exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, OperationFailure

from durable_agent.session import (
    Entry,
    EntryConflictError,
    StoreUnavailableError,
    encode_entry,
)
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo.claims import wire_hash
from durable_agent.stores.mongo.decode import translate_errors
from durable_agent.workflows.store_check import store_id
from tests.mongo.helpers import (
    Commands,
    Counted,
    claim_ids,
    entry,
    ids,
    inc_of,
    keys_of,
    unsettled_slots,
)
from tests.support.ferretdb import FerretDB

pytestmark = pytest.mark.mongo


# --- cancellation ---------------------------------------------------------------------------


async def test_cancel_before_io_has_no_effect(mongo_database: AsyncDatabase[Any]) -> None:
    store = MongoStore(mongo_database)
    await store.create_session("s1")
    task = asyncio.create_task(store.append_entries("s1", [entry("a")]))
    task.cancel()  # before the task first runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.load_entries("s1") == []


async def test_started_write_completes_after_cancel(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    """Cancelled once its first write went out (claiming the slot and IDs), the append still
    completes (shielded), and the caller's retry is a no-op."""
    commands = Commands()
    inserts = Counted("insert", wanted=2)  # claims, then the batch
    client = client_factory(event_listeners=[commands, inserts])
    store = MongoStore(client[mongo_database.name])
    await store.create_session("s1")
    started = commands.wait_for("started", "insert")
    started.clear()
    inserts.reset()
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


async def test_cancelled_conflicting_append_still_rolls_back(
    client_factory: Any, mongo_database: AsyncDatabase[Any], sync_db: Any
) -> None:
    """Releasing the claims of a conflicting batch is part of the shielded write."""
    commands = Commands()
    deletes = Counted("delete", wanted=2)  # one per released claim, n1 and n2
    client = client_factory(event_listeners=[commands, deletes])
    store = MongoStore(client[mongo_database.name])
    await store.create_session("s1")
    await store.append_entries("s1", [entry("x", "stored")])
    inserting = commands.wait_for("started", "insert")
    inserting.clear()
    task = asyncio.create_task(
        store.append_entries("s1", [entry("n1"), entry("n2"), entry("x", "changed")])
    )
    await asyncio.wait_for(inserting.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(deletes.done.wait(), timeout=10)
    assert claim_ids(sync_db, "s1") == {"x"}
    [only] = await store.load_entries("s1")
    assert encode_entry(only) == encode_entry(entry("x", "stored"))
    await store.append_entries("s1", [entry("n1"), entry("n2")])  # their IDs are free again
    assert ids(await store.load_entries("s1")) == ["x", "n1", "n2"]


# --- a server that goes away ----------------------------------------------------------------


def _client(server: FerretDB, **options: Any) -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(
        server.uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000, **options
    )


async def test_stopped_server_raises_unavailable_then_retry_succeeds_once(
    private_server: FerretDB,
) -> None:
    client = _client(private_server)
    try:
        store = MongoStore(client["faults"])
        await store.create_session("s1")
        await store.append_entries("s1", [entry("e1")])

        await asyncio.to_thread(private_server.stop)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "append": lambda: store.append_entries("s1", [entry("e2", parent="e1")]),
            "load_entries": lambda: store.load_entries("s1"),
            "load_entries_after": lambda: store.load_entries_after("s1", 1),
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
    client = _client(private_server)
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


async def test_server_lost_mid_batch_leaves_all_or_nothing(private_server: FerretDB) -> None:
    """10-entry batches while the server is stopped: the failed batch is either wholly stored
    or absent (one document), and its retry after the restart completes it exactly once."""
    client = _client(private_server)
    try:
        store = MongoStore(client["faults"])
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
    the same one) notices the IDs are claimed but not stored, fences the crashed attempt's
    document (so it can never land) and writes them, once. Nothing was stored, so a retry whose
    content differs from the crashed attempt's is stored too: only a stored entry wins."""
    commands = Commands()
    client = _client(private_server, event_listeners=[commands])
    sync: MongoClient[dict[str, Any]] = MongoClient(private_server.uri, tz_aware=True)
    try:
        store = MongoStore(client["crash"])
        await store.create_session("s1")
        await store.append_entries("s1", [entry("first")])
        commands.arm(private_server.stop, after="insert")  # right after the claims insert
        with pytest.raises(StoreUnavailableError):
            await store.append_entries("s1", [entry("a"), entry("b")])
        await asyncio.to_thread(private_server.start)
        db = sync["crash"]
        assert claim_ids(db, "s1") == {"first", "a", "b"}
        assert db.entries.count_documents({"session_id": "s1"}) == 1  # no document of [a, b]
        fresh = MongoStore(client["crash"])
        await fresh.append_entries("s1", [entry("a"), entry("b", "changed")])
        await fresh.append_entries("s1", [entry("a"), entry("b", "changed")])  # now a no-op
        with pytest.raises(EntryConflictError) as info:
            await store.append_entries("s1", [entry("a"), entry("b")])  # b is stored otherwise
        assert info.value.entry_id == "b"
        loaded = await store.load_entries("s1")
        assert [encode_entry(e) for e in loaded] == [
            encode_entry(e) for e in (entry("first"), entry("a"), entry("b", "changed"))
        ]
        assert keys_of(db, "s1") == [["first"], ["a", "b"]]
        assert unsettled_slots(db, "s1") == []  # the crashed attempt's place is fenced
        claim = db.entries_claims.find_one({"_id": f"s1/{inc_of(db, 's1')}/b"})
        stored_a = db.entries.find_one({"entry_id": "a"})
        assert claim is not None and stored_a is not None and claim["q"] == stored_a["seq"]
        assert claim["h"] == wire_hash(encode_entry(entry("b", "changed")))
    finally:
        sync.close()
        await client.close()


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


async def test_the_store_id_of_a_stopped_server_is_unavailable(private_server: FerretDB) -> None:
    """A Temporal run start first compares the client's store ID with its workers': with the
    server stopped that read raises ``StoreUnavailableError`` (one line, the driver's error
    chained), as every other call of the store does, not the driver's own error."""
    client = _client(private_server)
    try:
        store = MongoStore(client["faults"])
        own = await store_id(store, create=True)
        await asyncio.to_thread(private_server.stop)
        for create in (False, True):
            with pytest.raises(StoreUnavailableError, match="cannot reach MongoDB") as info:
                await store_id(store, create=create)
            assert isinstance(info.value.__cause__, ConnectionFailure)
            assert "\n" not in str(info.value)
        await asyncio.to_thread(private_server.start)
        assert await store_id(store, create=False) == own
    finally:
        await client.close()


def test_a_request_the_server_cancelled_as_it_stopped_is_unavailable() -> None:
    """A FerretDB that stops while a write is in flight replies to it with InternalError
    "context canceled" (its transaction rolled back), where MongoDB replies InterruptedAtShutdown:
    both are the server going away, a retryable ``StoreUnavailableError``, not a bad request.
    Other InternalErrors stay the driver's own."""
    errmsg = (
        "[msg_insert.go:168 handler.(*Handler).MsgInsert] "
        "[db.go:134 fsql.(*DB).InTransaction] context canceled"
    )
    reply = {"ok": 0.0, "errmsg": errmsg, "code": 1, "codeName": "InternalError"}
    with (
        pytest.raises(StoreUnavailableError, match="context canceled") as info,
        translate_errors("session 's1'", lambda: "127.0.0.1:1"),
    ):
        raise OperationFailure(errmsg, 1, reply)
    assert isinstance(info.value.__cause__, OperationFailure)
    other = {**reply, "errmsg": "[msg_insert.go:168] something else went wrong"}
    assert isinstance(other["errmsg"], str)
    with (
        pytest.raises(OperationFailure),
        translate_errors("session 's1'", lambda: "127.0.0.1:1"),
    ):
        raise OperationFailure(other["errmsg"], 1, other)
