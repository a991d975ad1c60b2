"""The ``durable-agent`` commands (typer + rich).

Exit codes: 0 success, 1 failure (the message says why), 2 usage error (a bad argument, store
spec, session ID or Temporal profile), 3 no such session, entry or run, 130 interrupted. Every
command that talks to Temporal takes ``--address``, ``--namespace`` and ``--profile`` and reads the
``temporal`` CLI's variables and profiles; with no address anywhere it finds a running
``durable-agent dev`` server by itself. Errors say which Temporal and store were used (``-v``
says it up front).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from temporalio.service import RPCError

from ..ai.model import ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable.errors import AgentError
from ..session.errors import InvalidSessionIdError, SessionError, SessionNotFoundError
from ..workflows.config import TemporalConfigError
from ..workflows.worker import (
    DEFAULT_MAX_CACHED_WORKFLOWS,
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
)
from .appdef import AppLoadError
from .commands import NotFound, UsageError
from .entry import missing_extra
from .options import (
    AddressOpt,
    AgentOpt,
    JsonOpt,
    NamespaceOpt,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    VerboseOpt,
)
from .procs import ProcessError
from .settings import (
    DEFAULT_TASK_QUEUE,
    ENV_APP,
    ENV_TASK_QUEUE,
    data_dir,
    read_server_info,
)
from .stores import StoreSpecError, mongo_unreachable, resolve_store_spec
from .target import TARGET, TemporalFlags

__all__ = ["cli", "main"]

T = TypeVar("T")

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

cli = typer.Typer(
    name="durable-agent",
    help=(
        "AI-agent conversations that survive crashes, restarts and deploys.\n\n"
        "Start with `durable-agent demo`. Exit codes: 0 ok, 1 failure, 2 usage, "
        "3 not found, 130 interrupted."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _flags(
    address: str | None, namespace: str | None, profile: str | None, verbose: bool
) -> TemporalFlags:
    _verbose(verbose)
    return TemporalFlags(address=address, namespace=namespace, profile=profile)


def _verbose(verbose: bool) -> None:
    if verbose:
        TARGET.echo = lambda line: err.print(Text(line, style="dim"), soft_wrap=True)


def _queue(flag: str | None, flags: TemporalFlags | None = None) -> str:
    """Flag, environment, the queue a running ``dev`` advertises, then the default."""
    if flag:
        return flag
    if os.environ.get(ENV_TASK_QUEUE):
        return os.environ[ENV_TASK_QUEUE]
    if not os.environ.get("TEMPORAL_ADDRESS") and not (flags and flags.address):
        info = read_server_info(data_dir())
        if info is not None:
            return info.task_queue
    return DEFAULT_TASK_QUEUE


def _run(make: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine, turning known failures into a message and an exit code."""
    return _guard(lambda: asyncio.run(_call(make)))


def _fail(code: int, message: str) -> NoReturn:
    """Print ``error: message`` as plain text (never markup: error text can hold ``[/]`` or
    ``[redacted]``), then what the command was talking to, and exit with ``code``."""
    message = redact(message, configured_secrets(os.environ))  # the keys this process holds
    err.print(Text.assemble(("error: ", "red"), message), soft_wrap=True)
    for line in TARGET.lines():
        err.print(Text(f"  ({line})", style="dim"), soft_wrap=True)
    raise typer.Exit(code)


USAGE_ERRORS = (StoreSpecError, InvalidSessionIdError, UsageError, TemporalConfigError)
FAILURES = (
    AppLoadError,
    ProcessError,
    SessionError,
    ConnectionError,
    AgentError,
    ModelError,
    TimeoutError,
)


def _guard(body: Callable[[], T]) -> T:
    """Known failures become a one-line message and an exit code; bugs keep their traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None
    except (NotFound, SessionNotFoundError) as exc:
        _fail(3, str(exc))
    except USAGE_ERRORS as exc:
        _fail(2, str(exc))
    except FAILURES as exc:
        _fail(1, str(exc))
    except RPCError as exc:
        _fail(1, f"Temporal said: {exc}")
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None and "pip install" not in str(exc):
            raise
        _fail(1, message or str(exc))
    except Exception as exc:
        if _is_mongo_connection_failure(exc):
            _fail(1, str(mongo_unreachable(TARGET.store or "", exc)))
        raise


def _is_mongo_connection_failure(exc: BaseException) -> bool:
    """PyMongo's ConnectionFailure, without importing PyMongo when it is not installed."""
    module = sys.modules.get("pymongo.errors")
    failure = getattr(module, "ConnectionFailure", None)
    return failure is not None and isinstance(exc, failure)


async def _call(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def _interrupt_on(*signals: signal.Signals) -> None:
    """Treat these signals as Ctrl-C, so a closed terminal or a ``kill`` still runs the cleanup
    that stops the server and workers (asyncio turns SIGINT into cancelling the command)."""

    def forward(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    for sig in signals:
        signal.signal(sig, forward)


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

    _interrupt_on(signal.SIGTERM, signal.SIGHUP)
    code = _run(lambda: run_demo(console, keep=keep))
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

    code = _run(
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
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve an app's agents on a task queue (Temporal from TEMPORAL_ADDRESS etc.).

    Size the three limits from README "Running at scale"."""
    from .worker import check_worker, run_worker

    if check:
        queue = task_queue or os.environ.get(ENV_TASK_QUEUE) or None
        raise typer.Exit(_run(lambda: check_worker(queue, console)))

    ref = app or os.environ.get(ENV_APP)
    if not ref:
        _fail(2, f"--app module:attr is required (or set {ENV_APP})")
    flags = _flags(address, namespace, profile, verbose)
    code = _run(
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
            flags=flags,
        )
    )
    raise typer.Exit(code)


# -- session commands ---------------------------------------------------------------------------


@cli.command()
def run(
    session_id: Annotated[str, typer.Argument(help="Session to run on (created if unknown).")],
    text: Annotated[str, typer.Argument(help="The user message ('-' reads it from stdin).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    as_json: JsonOpt = False,
    timeout: Annotated[
        float, typer.Option(help="Give up (and cancel the run) after this.")
    ] = 300.0,
    leaf: Annotated[
        str | None,
        typer.Option(
            "--leaf",
            help="Run from this entry (an earlier branch; `root` starts a new one) instead of "
            "the last stored entry.",
            show_default=False,
        ),
    ] = None,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run one turn on Temporal and print it as it happens (or --json at the end)."""
    from .commands import run_turn

    flags = _flags(address, namespace, profile, verbose)
    message = sys.stdin.read() if text == "-" else text
    code = _run(
        lambda: run_turn(
            console,
            err,
            session_id=session_id,
            text=message,
            store_spec=resolve_store_spec(store),
            task_queue=_queue(task_queue, flags),
            agent_name=agent,
            as_json=as_json,
            limit=timedelta(seconds=timeout),
            leaf=leaf,
            flags=flags,
        )
    )
    raise typer.Exit(code)


@cli.command()
def sessions(store: StoreOpt = None, as_json: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """List the sessions of the store."""
    from .commands import list_sessions_cmd

    _verbose(verbose)
    raise typer.Exit(_run(lambda: list_sessions_cmd(console, resolve_store_spec(store), as_json)))


@cli.command()
def show(
    session_id: Annotated[str, typer.Argument(help="Session to show.")],
    store: StoreOpt = None,
    as_tree: Annotated[bool, typer.Option("--tree", help="Draw the whole branch tree.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print a session's transcript (the active path), or its whole tree with --tree."""
    from .commands import show_session

    _verbose(verbose)
    raise typer.Exit(
        _run(lambda: show_session(console, session_id, resolve_store_spec(store), as_tree, as_json))
    )


@cli.command()
def state(
    session_id: Annotated[str, typer.Argument(help="Session whose latest run to query.")],
    as_json: JsonOpt = False,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Query the live state() of the session's latest run on Temporal."""
    from .commands import query_state

    flags = _flags(address, namespace, profile, verbose)
    raise typer.Exit(_run(lambda: query_state(console, session_id, as_json, flags)))


@cli.command()
def chat(
    session_id: Annotated[str, typer.Argument(help="Session to chat in (created if unknown).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Interactive chat: /edit TEXT, /retry, /branch ID, /switch [N|ID|SESSION], /fork [ID],
    /compact [N], /tree, /show, /help, /quit. Ctrl-C during a reply cancels that run; the
    session stays."""
    from .chat import run_chat

    flags = _flags(address, namespace, profile, verbose)
    raise typer.Exit(
        _guard(
            lambda: run_chat(
                console,
                session_id=session_id,
                store_spec=resolve_store_spec(store),
                task_queue=_queue(task_queue, flags),
                agent_name=agent,
                flags=flags,
            )
        )
    )


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
