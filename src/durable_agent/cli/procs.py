"""The processes ``demo`` and ``dev`` start, one import away: child-process supervision
(:mod:`.supervise`), the Temporal dev server (:mod:`.devserver`) and worker subprocesses
(:mod:`.workerproc`). Kept so the names stay importable from here."""

from __future__ import annotations

from .devserver import (
    DevServer,
    ServerLock,
    current_server,
    start_dev_server,
    stop_orphan,
    temporal_binary,
    wait_for_ui,
    workflows_url,
)
from .supervise import ManagedProcess, ProcessError, free_port, wait_for_file
from .workerproc import start_worker, worker_argv

__all__ = [
    "DevServer",
    "ManagedProcess",
    "ProcessError",
    "ServerLock",
    "current_server",
    "free_port",
    "start_dev_server",
    "start_worker",
    "stop_orphan",
    "temporal_binary",
    "wait_for_file",
    "wait_for_ui",
    "workflows_url",
    "worker_argv",
]
