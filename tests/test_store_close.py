"""Closing a store (docs/design.md#store-contract): ``aclose()`` and ``async with`` release what
the store object holds, and every call after it raises ``StoreClosedError``, a typed store error,
never the backend's own (PyMongo's ``InvalidOperation``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from durable_agent.durable.live import clear_later
from durable_agent.session import RetentionStore, StoreClosedError, StoreUnavailableError
from durable_agent.session.deltas import Delta, DeltaKey
from durable_agent.stores import FileStore, MemoryStore
from tests.support.conformance import msg
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS, new_database_name

KINDS = ["memory", "file", "mongo"]


def _make(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> RetentionStore:
    if kind == "memory":
        return MemoryStore()
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    from durable_agent.stores.mongo import MongoStore

    uri = request.getfixturevalue("mongo_uri")
    client: AsyncMongoClient[Any] = AsyncMongoClient(
        uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    return MongoStore(client[new_database_name()])


def _calls(store: RetentionStore) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: store.create_session("s2"),
        lambda: store.load_session("s1"),
        lambda: store.load_entries("s1"),
        lambda: store.load_entries_after("s1", 0),  # type: ignore[attr-defined]
        lambda: store.append_entries("s1", [msg("e2", "later")]),
        lambda: store.list_sessions(),
        lambda: store.delete_session("s1"),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_calls_after_aclose_raise_store_closed(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async with _make(kind, request, tmp_path) as store:  # type: ignore[attr-defined]
        await store.create_session("s1")
        await store.append_entries("s1", [msg("e1", "hi")])
        if kind == "mongo":
            database = store.database
    for call in _calls(store):
        with pytest.raises(StoreClosedError, match="closed") as caught:
            await call()
        assert isinstance(caught.value, StoreUnavailableError)  # retryable on another store
    await store.aclose()  # closing again is no error
    if kind == "mongo":  # the client is the application's: still open, closed by it
        await database.list_collection_names()
        await database.client.close()
    elif kind == "file":  # what it stored stays for the next store object
        assert [e.id for e in await FileStore(tmp_path / "sessions").load_entries("s1")] == ["e1"]


async def test_a_mongo_store_whose_client_was_closed_says_so(
    mongo_uri: str, request: pytest.FixtureRequest
) -> None:
    from durable_agent.stores.mongo import MongoStore

    client: AsyncMongoClient[Any] = AsyncMongoClient(
        mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    store = MongoStore(client[new_database_name()])
    await store.create_session("s1")
    await client.close()  # by the application, not the store
    for call in _calls(store):
        with pytest.raises(StoreClosedError, match="client was closed"):
            await call()
    live, key = store.live_deltas(), DeltaKey("s1", "r1", 1)
    for delta_call in (
        lambda: live.publish(key, Delta(attempt=1, seq=1, size=2)),
        lambda: live.read(key),
        lambda: live.held([key]),
        lambda: live.clear(key),
        lambda: live.drop_session("s1"),
    ):
        with pytest.raises(StoreClosedError, match="client was closed"):
            await delta_call()


async def test_a_reply_cleared_after_its_store_closed_is_no_warning(
    mongo_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker clears a stored reply's live text a few seconds later; an application that
    closed its client meanwhile (a shutdown) gets no warning for it: the deltas expire."""
    from durable_agent.stores.mongo import MongoStore

    client: AsyncMongoClient[Any] = AsyncMongoClient(
        mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    store = MongoStore(client[new_database_name()])
    await store.create_session("s1")
    key = DeltaKey("s1", "r1", 1)
    await store.live_deltas().publish(key, Delta(attempt=1, seq=1, size=2))
    await client.close()
    with caplog.at_level(logging.INFO, logger="durable_agent"):
        await clear_later(store.live_deltas(), key, after=0)
    assert [r.getMessage() for r in caplog.records] == []


def _fds_to(directory: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory)):
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_file_store_aclose_closes_the_live_delta_files_it_holds(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = FileStore(root)
    await store.create_session("s1")
    key = DeltaKey(session_id="s1", run_id="r1", turn=1)
    await store.live_deltas().publish(key, Delta(attempt=1, seq=1, size=7))
    assert len(await store.live_deltas().read(key)) == 1  # a reply still streaming: kept open
    assert _fds_to(root) == 1
    await store.aclose()
    assert _fds_to(root) == 0
