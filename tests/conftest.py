"""Shared fixtures: the store conformance parametrization and real servers.

Every store kind in ``STORE_KINDS`` runs the same conformance suite and the durable-agent scenarios.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_agent.session import Store
from durable_agent.stores import FileStore, MemoryStore

STORE_KINDS = ["memory", "file"]


async def make_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh, empty store of ``kind``."""
    if kind == "memory":
        return MemoryStore()
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    raise ValueError(f"unknown store kind {kind!r}")


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each store kind in turn, empty."""
    yield await make_store(request.param, request, tmp_path)


EXECUTORS = ["local"]


@pytest.fixture(params=EXECUTORS)
def harness(request: pytest.FixtureRequest) -> object:
    """Each executor in turn (see tests/support/harness.py)."""
    from tests.support.harness import LocalHarness

    if request.param == "local":
        return LocalHarness()
    raise ValueError(request.param)
