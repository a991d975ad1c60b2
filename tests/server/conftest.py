"""Fixtures of the server tests: each test's report on its item (a failed browser test saves a
screenshot), the two ways a server runs its runs, and worker processes (those of the Temporal
tests)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from temporalio.client import Client

from tests.temporal.conftest import worker_processes  # noqa: F401


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(params=["in_process", pytest.param("on_temporal", marks=pytest.mark.temporal)])
def temporal(request: pytest.FixtureRequest) -> Client | None:
    """Each way a server runs its runs in turn: in process (``None``), then on the session's
    Temporal server (its client, started only for that case)."""
    if request.param == "in_process":
        return None
    client: Client = request.getfixturevalue("temporal_client")
    return client
