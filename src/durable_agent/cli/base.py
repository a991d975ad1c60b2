"""What every ``durable-agent`` command shares: the consoles, the typer app, and the guard that
turns known failures into one ``error:`` line, the target lines and an exit code.

Exit codes: 0 success, 1 failure (the message says why), 2 usage error (a bad argument, store
spec, session ID or Temporal profile), 3 no such session, entry or run, 130 interrupted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from temporalio.service import RPCError

from ..ai.model import ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable.errors import AgentError
from ..session.errors import InvalidSessionIdError, SessionError, SessionNotFoundError
from ..workflows.config import TemporalConfigError
from .appdef import AppLoadError
from .commands import NotFound, StoreMismatchError, UsageError
from .entry import missing_extra
from .procs import ProcessError
from .sessionscmd import NotConfirmed
from .settings import (
    DEFAULT_TASK_QUEUE,
    ENV_TASK_QUEUE,
    data_dir,
    read_server_info,
)
from .stores import StoreSpecError, mongo_unreachable
from .target import TARGET, TemporalFlags

__all__ = [
    "cli",
    "console",
    "err",
    "fail",
    "flags_from",
    "guard",
    "interrupt_on",
    "queue_for",
    "run_command",
    "set_verbose",
]

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


def flags_from(
    address: str | None, namespace: str | None, profile: str | None, verbose: bool
) -> TemporalFlags:
    set_verbose(verbose)
    return TemporalFlags(address=address, namespace=namespace, profile=profile)


def set_verbose(verbose: bool) -> None:
    if verbose:
        TARGET.echo = lambda line: err.print(Text(line, style="dim"), soft_wrap=True)


def queue_for(flag: str | None, flags: TemporalFlags | None = None) -> str:
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


def run_command(make: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine, turning known failures into a message and an exit code."""
    return guard(lambda: asyncio.run(call_command(make)))


def fail(code: int, message: str) -> NoReturn:
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
    StoreMismatchError,
)


def guard(body: Callable[[], T]) -> T:
    """Known failures become a one-line message and an exit code; bugs keep their traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None
    except (NotFound, SessionNotFoundError) as exc:
        fail(3, str(exc))
    except USAGE_ERRORS as exc:
        fail(2, str(exc))
    except NotConfirmed as exc:
        fail(1, str(exc))
    except FAILURES as exc:
        fail(1, str(exc))
    except RPCError as exc:
        fail(1, f"Temporal said: {exc}")
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None and "pip install" not in str(exc):
            raise
        fail(1, message or str(exc))
    except Exception as exc:
        if is_mongo_connection_failure(exc):
            fail(1, str(mongo_unreachable(TARGET.store or "", exc)))
        raise


def is_mongo_connection_failure(exc: BaseException) -> bool:
    """PyMongo's ConnectionFailure, without importing PyMongo when it is not installed."""
    module = sys.modules.get("pymongo.errors")
    failure = getattr(module, "ConnectionFailure", None)
    return failure is not None and isinstance(exc, failure)


async def call_command(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def interrupt_on(*signals: signal.Signals) -> None:
    """Treat these signals as Ctrl-C, so a closed terminal or a ``kill`` still runs the cleanup
    that stops the server and workers (asyncio turns SIGINT into cancelling the command)."""

    def forward(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    for sig in signals:
        signal.signal(sig, forward)
