"""``durable-agent worker``: serve an app's agents on a task queue until told to stop.

Stops cleanly on SIGTERM/SIGINT and, when started by ``demo``/``dev`` (``--parent-pid``), as soon
as its parent is gone, so a killed demo never leaves a worker behind. A Temporal server that is not
up yet is retried until ``connect_timeout`` (containers start in any order).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from temporalio.client import Client

from ..workflows import connect_from_env, create_worker
from ..workflows.worker import (
    DEFAULT_KNOWN_ENTRIES,
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    check_tuning,
)
from .appdef import load_app
from .commands import poller_identities
from .settings import DEFAULT_TASK_QUEUE
from .storeid import store_id, worker_identity
from .stores import OpenedStore, open_store
from .target import TemporalFlags, client_env, display_store

__all__ = ["check_worker", "connect_with_retry", "run_worker"]


async def connect_with_retry(within: float, flags: TemporalFlags | None = None) -> Client:
    """``connect_from_env``, retried every half second for ``within`` seconds."""
    env, settings = client_env(flags or TemporalFlags())
    deadline = time.monotonic() + within
    while True:
        try:
            return await connect_from_env(env)
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"cannot reach Temporal at {settings.address}: {exc}"
                ) from exc
            await asyncio.sleep(0.5)


async def check_worker(
    task_queue: str | None,
    console: Console,
    within: float = 5.0,
    flags: TemporalFlags | None = None,
) -> int:
    """``worker --check``: 0 if some worker polls the queue (a health check that proves polling,
    unlike a ready file), else 1. Connects as ``--address``/``--namespace``/``--profile`` say."""
    queue = task_queue or DEFAULT_TASK_QUEUE
    try:
        client = await connect_with_retry(within, flags)
        pollers = await poller_identities(client, queue)
    except Exception as exc:
        console.print(f"unhealthy: {exc}")
        return 1
    if not pollers:
        console.print(f"unhealthy: no worker polls task queue {queue}")
        return 1
    console.print(f"healthy: {len(pollers)} poller(s) on task queue {queue}")
    return 0


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent_pid:
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def run_worker(
    *,
    app_ref: str,
    store_spec: str,
    task_queue: str | None,
    console: Console,
    ready_file: Path | None = None,
    parent_pid: int | None = None,
    connect_timeout: float = 30.0,
    max_concurrent_activities: int = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_workflow_tasks: int = DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    max_cached_workflows: int = DEFAULT_MAX_CACHED_WORKFLOWS,
    known_entries: int = DEFAULT_KNOWN_ENTRIES,
    flags: TemporalFlags | None = None,
) -> int:
    """Run until stopped; the exit code. The limits go to :func:`create_worker`."""
    check_tuning(
        max_concurrent_activities,
        max_concurrent_workflow_tasks,
        max_cached_workflows,
        known_entries,
    )
    app = load_app(app_ref)
    queue = task_queue or app.task_queue or DEFAULT_TASK_QUEUE
    opened: OpenedStore | None = None
    if app.store is None:
        opened = open_store(store_spec)
        store = opened.store
        store_name = display_store(opened.spec)
    else:
        store = app.store
        store_name = type(store).__name__
    # The store's ID goes into the worker's identity, so clients can tell a store mismatch.
    identity = worker_identity(await store_id(store, create=True))
    client = await connect_with_retry(connect_timeout, flags)
    worker = await create_worker(
        client,
        task_queue=queue,
        store=store,
        agents=app.agents,
        publisher=app.publisher,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        max_cached_workflows=max_cached_workflows,
        known_entries=known_entries,
        identity=identity,
    )
    config = worker.config()  # what the temporalio Worker was really given
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = (
        asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid is not None else None
    )
    try:
        async with worker:
            console.print(
                f"worker {os.getpid()} ready: task queue [bold]{escape(queue)}[/], "
                f"agents {escape(', '.join(sorted(app.agents)))}, store {escape(store_name)}, "
                f"Temporal {escape(client.service_client.config.target_host)} "
                f"(namespace {escape(client.namespace)}); "
                f"max concurrent activities {config.get('max_concurrent_activities')}, "
                f"workflow tasks {config.get('max_concurrent_workflow_tasks')}, "
                f"cached workflows {config.get('max_cached_workflows')}, "
                f"known entries {known_entries} bytes",
                soft_wrap=True,
            )
            if ready_file is not None:
                tmp = ready_file.with_suffix(".tmp")
                tmp.write_text(f"{os.getpid()}\n")
                tmp.replace(ready_file)
            await stop.wait()
            console.print(f"worker {os.getpid()} stopping")
    finally:
        if ready_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(ready_file)
        if watcher is not None:
            watcher.cancel()
        if opened is not None:
            await opened.close()
    return 0
