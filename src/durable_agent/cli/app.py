"""The ``durable-agent`` commands (typer + rich): demo, dev and worker here, the session
commands in :mod:`.sessionsapp` (registered on import), the shared guard in :mod:`.base`.

Exit codes: 0 success, 1 failure (the message says why), 2 usage error (a bad argument, store
spec, session ID or Temporal profile), 3 no such session, entry or run, 130 interrupted. Every
command that talks to Temporal takes ``--address``, ``--namespace`` and ``--profile`` and reads the
``temporal`` CLI's variables and profiles; with no address anywhere it finds a running
``durable-agent dev`` server by itself. Errors say which Temporal and store were used (``-v``
says it up front).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..workflows.worker import (
    DEFAULT_KNOWN_ENTRIES,
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
)
from .base import (
    cli,
    console,
    fail,
    flags_from,
    interrupt_on,
    run_command,
)
from .options import (
    AddressOpt,
    NamespaceOpt,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    VerboseOpt,
)
from .settings import (
    DEFAULT_TASK_QUEUE,
    ENV_APP,
    ENV_TASK_QUEUE,
)
from .stores import resolve_store_spec

__all__ = ["cli", "main"]


# -- demo and dev -------------------------------------------------------------------------------


@cli.command()
def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the server and worker up until Ctrl-C.")
    ] = False,
) -> None:
    """Run the offline demo end to end: a real Temporal dev server, a worker that gets killed
    mid-run and replaced, branch, fork, compaction and the transcript tree."""
    from .demo import run_demo

    interrupt_on(signal.SIGTERM, signal.SIGHUP)
    code = run_command(lambda: run_demo(console, keep=keep))
    raise typer.Exit(code)


@cli.command()
def dev(
    app: Annotated[
        str | None,
        typer.Option(
            "--app", help=f"module:attr of the worker app (default: ${ENV_APP}, else the demo app)."
        ),
    ] = None,
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    port: Annotated[int, typer.Option(help="gRPC port (another is picked if taken).")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port (another is picked if taken).")] = 8233,
) -> None:
    """Run a Temporal dev server (with its Web UI) and a worker until Ctrl-C.

    Other commands (run, chat, state) find this server without TEMPORAL_ADDRESS."""
    from .devcmd import run_dev

    code = run_command(
        lambda: run_dev(
            console,
            app_ref=app or os.environ.get(ENV_APP) or "durable_agent.cli.demo_app:app",
            store_spec=resolve_store_spec(store),
            task_queue=task_queue or os.environ.get(ENV_TASK_QUEUE) or DEFAULT_TASK_QUEUE,
            port=port,
            ui_port=ui_port,
        )
    )
    raise typer.Exit(code)


@cli.command()
def worker(
    app: Annotated[
        str | None,
        typer.Option(
            "--app",
            help=f"module:attr (or file.py:attr) of a durable_agent.cli.App (default: ${ENV_APP}).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    ready_file: Annotated[
        Path | None,
        typer.Option(
            help="Create this file once polling, remove it on exit (container health checks)."
        ),
    ] = None,
    parent_pid: Annotated[int | None, typer.Option(hidden=True)] = None,
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to keep retrying an unreachable Temporal.")
    ] = 30.0,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 0 if a worker polls the queue, else 1.")
    ] = False,
    max_concurrent_activities: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES",
            help="Model calls, tool calls and store writes in flight in this process.",
        ),
    ] = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_workflow_tasks: Annotated[
        int,
        typer.Option(
            min=2,
            envvar="DURABLE_AGENT_MAX_CONCURRENT_WORKFLOW_TASKS",
            help="Workflow tasks (run steps) this process works on at once.",
        ),
    ] = DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    max_cached_workflows: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DURABLE_AGENT_MAX_CACHED_WORKFLOWS",
            help="Open runs kept in memory between turns (0: replay every task).",
        ),
    ] = DEFAULT_MAX_CACHED_WORKFLOWS,
    known_entries: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DURABLE_AGENT_KNOWN_ENTRIES",
            help="Bytes of stored entries kept in memory (all sessions, least recently used "
            "dropped first) so a model call needs no session load (0: none).",
        ),
    ] = DEFAULT_KNOWN_ENTRIES,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve an app's agents on a task queue (Temporal from TEMPORAL_ADDRESS etc.).

    Size the limits from README "Running at scale"."""
    from .worker import check_worker, run_worker

    if check:
        queue = task_queue or os.environ.get(ENV_TASK_QUEUE) or None
        check_flags = flags_from(address, namespace, profile, verbose)
        raise typer.Exit(run_command(lambda: check_worker(queue, console, flags=check_flags)))

    ref = app or os.environ.get(ENV_APP)
    if not ref:
        fail(2, f"--app module:attr is required (or set {ENV_APP})")
    flags = flags_from(address, namespace, profile, verbose)
    code = run_command(
        lambda: run_worker(
            app_ref=ref,
            store_spec=resolve_store_spec(store),
            task_queue=task_queue or os.environ.get(ENV_TASK_QUEUE) or None,
            console=console,
            ready_file=ready_file,
            parent_pid=parent_pid,
            connect_timeout=connect_timeout,
            max_concurrent_activities=max_concurrent_activities,
            max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
            max_cached_workflows=max_cached_workflows,
            known_entries=known_entries,
            flags=flags,
        )
    )
    raise typer.Exit(code)


from . import sessionsapp  # noqa: E402,F401  (registers the session commands)


def main() -> None:
    """Entry point: run the command, then leave with ``os._exit`` after flushing, because the
    Temporal SDK's native threads can abort a normal interpreter shutdown."""
    code = 0
    try:
        cli()
    except SystemExit as exc:
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            code = 1
    except Exception as exc:  # a bug: show it, fail
        import traceback

        traceback.print_exception(exc)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
