"""Fixtures of the MongoStore tests: extra clients, a synchronous view of the test database, and
a private FerretDB a test may stop."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.database import AsyncDatabase

from tests.support.ferretdb import FerretDB, FerretDBUnavailable, start_ferretdb
from tests.support.mongo import SERVER_SELECTION_TIMEOUT_MS


@pytest.fixture
async def client_factory(mongo_uri: str) -> AsyncIterator[Any]:
    """Make extra ``AsyncMongoClient``s on the test server; all closed after the test."""
    clients: list[AsyncMongoClient[dict[str, Any]]] = []

    def make(**options: Any) -> AsyncMongoClient[dict[str, Any]]:
        options.setdefault("serverSelectionTimeoutMS", SERVER_SELECTION_TIMEOUT_MS)
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def sync_db(mongo_uri: str, mongo_database: AsyncDatabase[dict[str, Any]]) -> Iterator[Any]:
    """The test's database through a synchronous client, for reading raw documents."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri, tz_aware=True)
    with client:
        yield client[mongo_database.name]


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[FerretDB]:
    """A FerretDB of this test's own, so stopping it leaves the shared server alone."""
    try:
        server = start_ferretdb(tmp_path / "ferretdb")
    except FerretDBUnavailable as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem and os.environ.get("MONGODB_URI"):
        pytest.skip(f"needs a FerretDB it can stop (the MONGODB_URI server is not): {problem}")
    if problem:
        pytest.fail(problem, pytrace=False)
    try:
        yield server
    finally:
        server.stop()
