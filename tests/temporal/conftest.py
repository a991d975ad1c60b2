"""Fixtures of the Temporal executor tests: the server's address and worker subprocesses."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def address(temporal_client: Client) -> str:
    """``host:port`` of the session's Temporal server (what a worker subprocess connects to)."""
    return temporal_client.service_client.config.target_host


class WorkerProcesses:
    """Starts ``tests.support.worker_process`` workers; whatever is left is killed at teardown."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.worker_process", *args],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[Any]) -> None:
        """SIGKILL: no cleanup, no goodbye to the server."""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def log(self, index: int) -> str:
        return (self.logs / f"worker-{index}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = WorkerProcesses(logs)
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Finalize what the test's workers left behind now, on this thread.

    A worker that shuts down with a workflow still cached (a terminated run, say) drops that
    workflow's coroutines, and the garbage collector later closes the async generators they
    were suspended in. Collected at an arbitrary later moment, those finalizers can coincide
    with an ``ast.parse`` (pytest rewriting a late import) and trip CPython 3.11's shared AST
    recursion counter (``SystemError: AST constructor recursion depth mismatch``)."""
    yield
    gc.collect()
