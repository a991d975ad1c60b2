"""Fixtures of the server tests: each test's report on its item (a failed browser test saves a
screenshot), and worker processes (those of the Temporal tests)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.temporal.conftest import WorkerProcesses


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = WorkerProcesses(logs)
    try:
        yield procs
    finally:
        procs.stop_all()
