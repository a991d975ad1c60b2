"""Pytest fixtures for a real MongoDB-compatible server: ``mongo_uri`` and ``mongo_database``.

``mongo_uri`` (session scope) is ``$MONGODB_URI`` when set (a real MongoDB, nothing is built),
otherwise a FerretDB started for this test session by :mod:`tests.support.ferretdb`. When there is
neither, the fixture fails (never skips) with one message naming both options, so CI cannot pass
with the Mongo tests silently missing.

``mongo_database`` (function scope) is a fresh, uniquely named database on a PyMongo
``AsyncMongoClient``, dropped afterwards. It is a *synchronous* fixture on purpose: the shared
``store`` fixture is async and obtains it through ``request.getfixturevalue``, and pytest-asyncio
cannot set up an async fixture from inside a running event loop.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.database import AsyncDatabase

from tests.support.ferretdb import FerretDBUnavailable, start_ferretdb

__all__ = ["SERVER_SELECTION_TIMEOUT_MS", "mongo_database", "mongo_uri", "new_database_name"]

#: Short enough that a test against a dead server fails fast, long enough for a loaded machine.
SERVER_SELECTION_TIMEOUT_MS = 3000


def new_database_name() -> str:
    """A database name no other test uses (FerretDB limits names to 63 characters)."""
    return f"da_test_{secrets.token_hex(6)}"


@pytest.fixture(scope="session")
def mongo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of the server the Mongo tests use; FerretDB is started here and stopped by PID."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    try:
        server = start_ferretdb(tmp_path_factory.mktemp("ferretdb"))
    except FerretDBUnavailable as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:  # failed outside the except block, so the report is just the one message
        pytest.fail(problem, pytrace=False)
    try:
        yield server.uri
    finally:
        server.stop()


def _close(client: AsyncMongoClient[Any]) -> None:
    """Close ``client`` on the event loop it used; a client that never did I/O has nothing open.

    An async client binds to the loop of its first operation and can only be closed there, but
    this teardown runs outside any loop. PyMongo exposes that loop only as the private ``_loop``
    attribute; event listeners cannot record it instead, because a client with listeners cannot
    even be constructed outside a running loop.
    """
    loop = getattr(client, "_loop", None)
    if not isinstance(loop, asyncio.AbstractEventLoop) or loop.is_closed():
        return
    if loop.is_running():  # torn down from inside the loop: let the loop finish the close
        loop.create_task(client.close())
    else:
        loop.run_until_complete(client.close())


@pytest.fixture
def mongo_database(mongo_uri: str) -> Iterator[AsyncDatabase[dict[str, Any]]]:
    """A fresh database on its own ``AsyncMongoClient``; dropped after the test."""
    name = new_database_name()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
    )
    try:
        yield client[name]
    finally:
        try:
            _close(client)
        finally:
            # A synchronous client: dropping must not depend on the state of any event loop.
            sync_client: MongoClient[dict[str, Any]] = MongoClient(
                mongo_uri, serverSelectionTimeoutMS=SERVER_SELECTION_TIMEOUT_MS
            )
            with sync_client:
                sync_client.drop_database(name)
