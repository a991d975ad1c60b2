"""Supervising the child processes ``demo`` and ``dev`` start: spawn, wait until ready, stop.

Everything started here is stopped by its PID (SIGTERM, then SIGKILL after a deadline), never by
name; on Linux a child also dies with its parent (``--pdeathsig``), so a killed parent leaves
nothing behind that the next run's checks would not find.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "ManagedProcess",
    "ProcessError",
    "die_with_parent",
    "free_port",
    "spawn",
    "wait_for_file",
]


class ProcessError(RuntimeError):
    """A process we started failed to come up (the message says where its log is)."""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the server will (Go sets SO_REUSEADDR): a port in TIME_WAIT after our own last
        # run is free for it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(preferred: int | None = None, avoid: Sequence[int] = ()) -> int:
    """``preferred`` if it is free, else a port the kernel picks (never one of ``avoid``)."""
    if preferred and preferred not in avoid and _port_free(preferred):
        return preferred
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port


@dataclass
class ManagedProcess:
    """A child process with its log file; ``stop`` ends it by PID."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash would; reaps the child."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._close_log()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit code."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()
        return self.proc.returncode

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def die_with_parent(argv: list[str]) -> list[str]:
    """On Linux, run ``argv`` under ``setpriv --pdeathsig TERM`` so the kernel stops it if we are
    SIGKILLed before our cleanup runs (the server has no parent watchdog of its own). Elsewhere,
    or without util-linux, the next run's orphan check covers it."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


def spawn(name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> ManagedProcess:
    """Start ``argv`` in its own session, output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        # Own process group: a Ctrl-C in the terminal reaches us, and we stop children in order.
        start_new_session=True,
    )
    return ManagedProcess(name, proc, log_path, log)


def _read_if_exists(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


async def wait_for_file(path: Path, proc: ManagedProcess, within: float) -> str:
    """Poll until ``path`` exists (the worker's readiness signal); its content."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        content = await asyncio.to_thread(_read_if_exists, path)
        if content is not None:
            return content
        if not proc.running():
            raise ProcessError(
                f"the {proc.name} exited with code {proc.proc.returncode}; "
                f"its log ({proc.log_path}) ends:\n{proc.log_tail()}"
            )
        await asyncio.sleep(0.05)
    raise ProcessError(f"the {proc.name} did not become ready in {within:.0f} s ({proc.log_path})")
