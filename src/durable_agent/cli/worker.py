"""``durable-agent worker``: serve an app's agents on a task queue until told to stop, and say
whether it is alive; and how a client finds the workers on its queue and tells whether they use
its store.

The worker stops cleanly on SIGTERM/SIGINT and, when started by ``demo``/``dev``
(``--parent-pid``), as soon as its parent is gone, so a killed demo never leaves a worker behind.
Stopping, it polls no more and gives the calls in flight ``--shutdown-grace`` seconds to finish
(a deploy must not fail a tool that may run only once); a second signal ends it at once.
Its log lines carry time and level, as text or JSON (``--log-format``), and an expected failure
takes one line (:mod:`durable_agent.workflows.worker_logs`). While it polls it beats its
``--ready-file`` every half second; ``worker --check --ready-file PATH`` is healthy only while that
process is alive and its last beat is fresh (:func:`.processes.check_liveness`), Temporal up or
not: a restart would not bring Temporal back (the worker retries its polls; README "Health").
A Temporal server that is not up yet is retried until ``--connect-timeout`` (containers start in
any order). The worker's Temporal identity carries its store's ID (``pid@host store:<id>``,
:mod:`durable_agent.workflows.store_check`), which Temporal reports for the task queue's pollers,
so a client compares it with its own store's before it starts a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from temporalio.client import Client
from temporalio.worker import Worker

from ..session.deltas import FASTEST_WRITE, SLOWEST_WRITE, WRITE_EVERY
from ..workflows import create_worker
from ..workflows.store_check import mismatch, poller_identities, store_id
from ..workflows.worker import (
    DEFAULT_KNOWN_ENTRIES,
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    check_tuning,
)
from ..workflows.worker_logs import configure_worker_logging
from . import load_app, render
from .config import (
    DEFAULT_TASK_QUEUE,
    ENV_APP,
    ENV_TASK_QUEUE,
    AddressOpt,
    CommandError,
    LogFormatOpt,
    NamespaceOpt,
    OpenedStore,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    TemporalFlags,
    VerboseOpt,
    connect,
    display_store,
    open_store,
    resolve_store_spec,
)
from .processes import (
    HEARTBEAT_INTERVAL,
    beat,
    check_liveness,
    claim_ready_file,
    stop_on_signals,
)
from .render import console, fail, flags_from, run_command

__all__ = [
    "StoreMismatchError",
    "check_workers",
    "run_worker",
    "worker",
    "worker_identity",
]


logger = logging.getLogger("durable_agent.worker")
"""The worker's own lines: ready, stopping, and a failure that ends it."""


# -- the command ----------------------------------------------------------------------------------


ActivitiesOpt = Annotated[
    int,
    typer.Option(
        min=1,
        envvar="DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES",
        help="Model calls, tool calls and store writes in flight in this process.",
    ),
]
WorkflowTasksOpt = Annotated[
    int,
    typer.Option(
        min=2,
        envvar="DURABLE_AGENT_MAX_CONCURRENT_WORKFLOW_TASKS",
        help="Workflow tasks (run steps) this process works on at once.",
    ),
]
CachedWorkflowsOpt = Annotated[
    int,
    typer.Option(
        min=0,
        envvar="DURABLE_AGENT_MAX_CACHED_WORKFLOWS",
        help="Open runs kept in memory between turns (0: replay every task).",
    ),
]
KnownEntriesOpt = Annotated[
    int,
    typer.Option(
        min=0,
        envvar="DURABLE_AGENT_KNOWN_ENTRIES",
        help="Bytes of stored entries kept in memory (all sessions, least recently used "
        "dropped first) so a model call needs no session load (0: none).",
    ),
]
LiveEveryOpt = Annotated[
    float,
    typer.Option(
        min=FASTEST_WRITE,
        max=SLOWEST_WRITE,
        envvar="DURABLE_AGENT_LIVE_EVERY",
        help="Seconds between two writes of a streaming reply's live text (slower: fewer "
        "writes and client wake-ups, larger steps).",
    ),
]

DEFAULT_SHUTDOWN_GRACE = 8.0
"""Seconds a stopping worker waits for its calls in flight: under the 10 s Docker and Compose
give a container between SIGTERM and SIGKILL, so the worker still exits by itself."""

ShutdownGraceOpt = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=3600.0,
        envvar="DURABLE_AGENT_SHUTDOWN_GRACE",
        help="Seconds a stopping worker (SIGTERM, Ctrl-C) lets calls in flight finish before it "
        "cancels them for another worker to retry; a second signal stops it at once.",
    ),
]

ReadyFileOpt = Annotated[
    Path | None,
    typer.Option(
        help="Create this file once polling and beat it twice a second, remove it on exit; "
        "--check reads it (container health checks)."
    ),
]
ConnectTimeoutOpt = Annotated[
    float, typer.Option(min=0.0, help="Seconds to keep retrying an unreachable Temporal.")
]
CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Exit 0 if the worker that writes --ready-file is alive and its heartbeat "
        "fresh, else 1.",
    ),
]
AppOpt = Annotated[
    str | None,
    typer.Option(
        "--app",
        help=f"module:attr (or file.py:attr) of a durable_agent.cli.App (default: ${ENV_APP}).",
        show_default=False,
    ),
]


def worker(
    app: AppOpt = None,
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    ready_file: ReadyFileOpt = None,
    parent_pid: Annotated[int | None, typer.Option(hidden=True)] = None,
    connect_timeout: ConnectTimeoutOpt = 30.0,
    check: CheckOpt = False,
    max_concurrent_activities: ActivitiesOpt = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_workflow_tasks: WorkflowTasksOpt = DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    max_cached_workflows: CachedWorkflowsOpt = DEFAULT_MAX_CACHED_WORKFLOWS,
    known_entries: KnownEntriesOpt = DEFAULT_KNOWN_ENTRIES,
    live_every: LiveEveryOpt = WRITE_EVERY,
    shutdown_grace: ShutdownGraceOpt = DEFAULT_SHUTDOWN_GRACE,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
    log_format: LogFormatOpt = "text",
) -> None:
    """Serve an app's agents on a task queue (Temporal from TEMPORAL_ADDRESS etc.).

    Size the limits from README "Running at scale"."""
    flags = flags_from(address, namespace, profile, verbose)
    queue = task_queue or os.environ.get(ENV_TASK_QUEUE) or None
    if check:
        raise typer.Exit(check_worker(ready_file))
    ref = app or os.environ.get(ENV_APP)
    if not ref:
        fail(2, f"--app module:attr is required (or set {ENV_APP})")
    configure_worker_logging(log_format)
    render.FAILURE_LOG = logger
    limits = (
        max_concurrent_activities,
        max_concurrent_workflow_tasks,
        max_cached_workflows,
        known_entries,
    )
    code = run_command(
        lambda: run_worker(
            app_ref=ref,
            store_spec=resolve_store_spec(store),
            task_queue=queue,
            ready_file=ready_file,
            parent_pid=parent_pid,
            connect_timeout=connect_timeout,
            limits=limits,
            live_every=live_every,
            shutdown_grace=shutdown_grace,
            flags=flags,
        )
    )
    raise typer.Exit(code)


# -- the worker's identity ----------------------------------------------------------------------


def worker_identity(sid: str | None) -> str:
    """Temporal's default identity (``pid@host``), plus the store's ID when there is one."""
    base = f"{os.getpid()}@{socket.gethostname()}"
    return f"{base} store:{sid}" if sid else base


# -- the workers on a queue -----------------------------------------------------------------------


class StoreMismatchError(CommandError):
    """The workers on the queue advertise another store's ID than the command's store: a run
    would be stored where the command cannot see it (exit code 1, before anything is created)."""


async def check_workers(
    warn: Console, client: Client, task_queue: str, opened: OpenedStore
) -> None:
    """Warn when no worker polls the queue; :class:`StoreMismatchError` when the workers use
    another store (compared by store ID: specs differ between a host and a container)."""
    identities = await poller_identities(client, task_queue)
    if not identities:
        warn.print(
            f"[yellow]warning:[/] no worker polls task queue {escape(repr(task_queue))}; runs "
            "wait for one (start `durable-agent worker` or `durable-agent dev`)",
            soft_wrap=True,
        )
        return
    try:
        own = await store_id(opened.store, create=False)
    except Exception:  # the store's own failure surfaces on first use, with its message
        return
    if mismatch(own, identities):
        raise StoreMismatchError(
            f"the worker(s) on task queue {task_queue!r} use another store than this command "
            f"({display_store(opened.spec)}): give both the same --store"
        )


def check_worker(ready_file: Path | None) -> int:
    """``worker --check``: 0 if the worker writing ``ready_file`` is alive and beating, else 1
    (the check of this one worker, from its own process: not of any poller on its queue)."""
    if ready_file is None:
        fail(2, "--check needs --ready-file PATH: the ready file of the worker to check")
    healthy, line = check_liveness(ready_file)
    console.print(f"{'healthy' if healthy else 'unhealthy'}: {line}", soft_wrap=True, markup=False)
    return 0 if healthy else 1


# -- serving --------------------------------------------------------------------------------------


async def run_worker(
    *,
    app_ref: str,
    store_spec: str,
    task_queue: str | None,
    ready_file: Path | None = None,
    parent_pid: int | None = None,
    connect_timeout: float = 30.0,
    limits: tuple[int, int, int, int] = (
        DEFAULT_MAX_CONCURRENT_ACTIVITIES,
        DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
        DEFAULT_MAX_CACHED_WORKFLOWS,
        DEFAULT_KNOWN_ENTRIES,
    ),
    live_every: float = WRITE_EVERY,
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
    flags: TemporalFlags | None = None,
) -> int:
    """Run until stopped; the exit code (``limits`` in the order :func:`check_tuning` takes)."""
    _exit_on_signals("stopped before it was ready")  # it may wait for Temporal for a while
    activities, workflow_tasks, cached, known = limits
    check_tuning(activities, workflow_tasks, cached, known, live_every)
    app = load_app(app_ref)
    queue = task_queue or app.task_queue or DEFAULT_TASK_QUEUE
    opened = open_store(store_spec) if app.store is None else None
    store = opened.store if opened is not None else app.store
    assert store is not None
    store_name = display_store(opened.spec) if opened is not None else type(store).__name__
    try:
        identity = worker_identity(await store_id(store, create=True))  # clients compare it
        client = await connect(flags, within=connect_timeout)
        temporal_worker = await create_worker(
            client,
            task_queue=queue,
            store=store,
            agents=app.agents,
            publisher=app.publisher,
            max_concurrent_activities=activities,
            max_concurrent_workflow_tasks=workflow_tasks,
            max_cached_workflows=cached,
            known_entries=known,
            live_every=live_every,
            identity=identity,
            graceful_shutdown_timeout=timedelta(seconds=shutdown_grace),
        )
        config = temporal_worker.config()  # what the temporalio Worker was really given
        ready = (
            f"worker {os.getpid()} ready: task queue {queue}, "
            f"agents {', '.join(sorted(app.agents))}, store {store_name}, "
            f"Temporal {client.service_client.config.target_host} (namespace {client.namespace}); "
            f"max concurrent activities {config.get('max_concurrent_activities')}, "
            f"workflow tasks {config.get('max_concurrent_workflow_tasks')}, "
            f"cached workflows {config.get('max_cached_workflows')}, known entries {known} bytes, "
            f"live text every {live_every:g} s, shutdown grace {shutdown_grace:g} s"
        )
        await _serve(temporal_worker, ready, queue, ready_file, parent_pid, shutdown_grace)
    finally:
        if opened is not None:
            await opened.close()
    return 0


async def _serve(
    temporal_worker: Worker,
    ready: str,
    queue: str,
    ready_file: Path | None,
    parent_pid: int | None,
    grace: float,
) -> None:
    """Poll until SIGTERM/SIGINT or the parent's exit; the ready file beats while polling."""
    stop = stop_on_signals(*STOP_SIGNALS)
    if ready_file is not None:
        claim_ready_file(ready_file)
    try:
        async with temporal_worker:
            logger.info("%s", ready)
            while not stop.is_set():
                if parent_pid is not None and os.getppid() != parent_pid:
                    break
                if ready_file is not None and temporal_worker.is_running:
                    with contextlib.suppress(OSError):  # a missed beat reads as stuck: that is all
                        beat(ready_file, queue)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), HEARTBEAT_INTERVAL)
            if ready_file is not None:  # it says "polls", which is over
                with contextlib.suppress(OSError):
                    os.unlink(ready_file)
            _exit_on_signals("stopped at once (a second signal)")  # as a crash would
            logger.info(
                "worker %d stopping: calls in flight have %g s to finish", os.getpid(), grace
            )
    finally:
        if ready_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(ready_file)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _exit_on_signals(why: str) -> None:
    """From now on SIGTERM or SIGINT ends the process at once (exit 128 + the signal), saying
    ``why``: by an exit, not the signal's default action, which a container's PID 1 lacks."""

    def now(sig: int) -> None:
        logger.info("worker %d %s", os.getpid(), why)
        os._exit(128 + sig)

    for sig in STOP_SIGNALS:
        asyncio.get_running_loop().add_signal_handler(sig, now, sig)
