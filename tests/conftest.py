"""Shared fixtures: the store conformance parametrization and real servers.

Every store kind in ``STORE_KINDS`` runs the same conformance suite and the durable-agent scenarios.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent.session import RetentionStore
from durable_agent.stores import FileStore, MemoryStore
from tests.support.harness import LocalHarness
from tests.support.mongo import mongo_database, mongo_uri  # noqa: F401
from tests.support.temporal import TemporalHarness, temporal_environment

STORE_KINDS = ["memory", "file", "mongo"]

# A shell without job control starts a background job (`make test &`, `nohup`) with SIGINT
# ignored, and its children inherit that: the commands these tests interrupt as a terminal's
# Ctrl-C does would ignore it (and time out). A handled signal is reset to its default at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


async def make_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> RetentionStore:
    """A fresh, empty store of ``kind``."""
    if kind == "memory":
        return MemoryStore()
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    if kind == "mongo":
        from durable_agent.stores.mongo import MongoStore

        return MongoStore(request.getfixturevalue("mongo_database"))
    raise ValueError(f"unknown store kind {kind!r}")


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RetentionStore]:
    """Each store kind in turn, empty."""
    yield await make_store(request.param, request, tmp_path)


EXECUTORS = ["local", "temporal"]


@pytest.fixture(scope="session")
async def temporal_client() -> AsyncIterator[Client]:
    """The session's real Temporal server (a local dev server unless TEMPORAL_ADDRESS is set)."""
    async with temporal_environment() as client:
        yield client


@pytest.fixture(params=EXECUTORS)
async def harness(request: pytest.FixtureRequest, temporal_client: Client) -> AsyncIterator[object]:
    """Each executor in turn (see tests/support/harness.py)."""
    if request.param == "local":
        yield LocalHarness()
        return
    async with contextlib.AsyncExitStack() as stack:
        yield TemporalHarness(temporal_client, stack)
