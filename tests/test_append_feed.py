"""A store's append feed wakes the followers of a session (docs/design.md#following-a-session).

``MemoryStore`` tells its watchers of every append and delete, on the event loop each watched
from (the store is shared across threads); ``MongoStore`` follows a change stream where the
server has them (a replica set: run with ``MONGODB_URI`` pointing at one) and says once, and
falls back to polling, where it has not (FerretDB, a standalone ``mongod``); ``FileStore`` has no
feed. A follower woken by the feed reads at once, and backs off further while the feed is up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from durable_agent.durable.follow import PUSHED_READ, SessionFollower
from durable_agent.session import AppendFeed, SessionNotFoundError, Store
from durable_agent.stores import FileStore, MemoryStore
from tests.support.conformance import fresh, msg
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS

WITHIN = 10.0
"""Seconds a wake-up may take at most before the test fails (it comes in milliseconds)."""


def _flag() -> tuple[asyncio.Event, Callable[[], None]]:
    event = asyncio.Event()
    return event, event.set


async def _empty_reads(follower: SessionFollower, n: int) -> None:
    for _ in range(n):
        assert await follower.read() == []


async def test_memory_store_wakes_a_follower_from_another_thread() -> None:
    store = MemoryStore()
    sid = await fresh(store)
    woken, on_wake = _flag()
    follower = SessionFollower(store, sid, on_wake=on_wake)
    await _empty_reads(follower, 8)  # the first read watches; then the back-off grows
    assert follower.pushed
    assert follower.due_in() > follower.slowest  # past its cap without a feed, up to PUSHED_READ
    assert follower.due_in() <= PUSHED_READ

    # a thread-pool activity appends on its own event loop
    writer = threading.Thread(target=lambda: asyncio.run(store.append_entries(sid, [msg("a")])))
    writer.start()
    await asyncio.wait_for(woken.wait(), WITHIN)
    writer.join()
    assert follower.woken and follower.due_in() == 0.0
    assert [(seq, e.id) for seq, e in await follower.read()] == [(1, "a")]
    follower.close()
    assert not follower.pushed


async def test_a_closed_follower_is_not_woken_and_a_delete_wakes() -> None:
    store = MemoryStore()
    sid = await fresh(store)
    calls: list[str] = []
    first = SessionFollower(store, sid, on_wake=lambda: calls.append("first"))
    await first.read()
    first.close()
    later, on_later = _flag()
    second = SessionFollower(store, sid, on_wake=on_later)
    await second.read()
    await store.append_entries(sid, [msg("a")])
    await asyncio.wait_for(later.wait(), WITHIN)  # wake-ups run in watch order: first's is past
    assert calls == []

    later.clear()
    await store.delete_session(sid)
    await asyncio.wait_for(later.wait(), WITHIN)
    with pytest.raises(SessionNotFoundError):
        await second.read()  # the follower learns of the delete at once, not at its next poll
    second.close()


async def test_a_store_without_a_feed_backs_off_to_its_slowest(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    assert not isinstance(store, AppendFeed)
    sid = await fresh(store)
    follower = SessionFollower(store, sid, on_wake=lambda: pytest.fail("no feed to wake it"))
    await _empty_reads(follower, 8)
    assert not follower.pushed
    assert follower.due_in() <= follower.slowest
    follower.close()


async def test_mongo_store_without_change_streams_says_so_once_and_polls(
    mongo_database: Any, mongo_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    from durable_agent.stores.mongo import MongoStore

    if await _replica_set(mongo_uri):
        pytest.skip("this server has change streams (the test below covers it)")
    store = MongoStore(mongo_database)
    sid = await fresh(store)
    caplog.set_level(logging.INFO, logger="durable_agent.mongo")
    watch = store.watch_appends(sid, lambda: pytest.fail("no change stream to wake it"))
    assert await watch.ready() is False
    assert not watch.live
    again = store.watch_appends(sid, lambda: None)
    assert await again.ready() is False  # not tried again for this store object
    assert sum("no change streams" in r.getMessage() for r in caplog.records) == 1
    watch.close()
    again.close()

    follower = SessionFollower(store, sid)
    await follower.read()
    assert not follower.pushed
    await store.append_entries(sid, [msg("a")])
    assert [e.id for _, e in await follower.read()] == ["a"]  # its reads find what polling would
    follower.close()


async def test_mongo_store_on_a_replica_set_wakes_on_another_clients_append(
    mongo_database: Any, mongo_uri: str
) -> None:
    from durable_agent.stores.mongo import MongoStore

    if not await _replica_set(mongo_uri):
        pytest.skip("needs MONGODB_URI on a replica set (change streams); FerretDB has none")
    store = MongoStore(mongo_database)
    sid = await fresh(store)
    woken, on_wake = _flag()
    follower = SessionFollower(store, sid, on_wake=on_wake)
    await follower.read()
    watch = store.watch_appends(sid, lambda: None)
    assert await watch.ready() is True
    watch.close()
    woken.clear()  # the feed going up wakes every watcher once
    other: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    try:
        writer: Store = MongoStore(other[mongo_database.name])
        await writer.append_entries(sid, [msg("a")])
        await asyncio.wait_for(woken.wait(), WITHIN)
    finally:
        await other.close()
    assert follower.pushed
    assert [e.id for _, e in await follower.read()] == ["a"]
    follower.close()


async def _replica_set(uri: str) -> bool:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    try:
        hello = await client.admin.command("hello")
    finally:
        await client.close()
    return "setName" in hello
