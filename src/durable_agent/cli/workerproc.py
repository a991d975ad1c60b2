"""Worker subprocesses: ``durable-agent worker`` started by this interpreter, ready when it polls.

The worker writes a ready file once it polls its task queue, and watches ``--parent-pid`` so it
stops when the ``demo``/``dev`` that started it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

from .supervise import ManagedProcess, spawn, wait_for_file

__all__ = ["start_worker", "worker_argv"]


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
    proc = spawn(name, worker_argv(app_ref, store_spec, task_queue, ready), log_path, env)
    try:
        await wait_for_file(ready, proc, within)
    except BaseException:
        proc.stop()
        raise
    finally:
        with contextlib.suppress(OSError):
            ready.unlink()
    return proc
