"""The ``durable-agent`` command (``python -m durable_agent.cli`` and the script's entry point):
every subcommand on one typer app.

A base install (``pip install durable-agent``) puts the script on PATH although the commands need
the ``cli`` and ``temporal`` extras, so nothing at this module's top level needs an extra: the
commands are imported inside :func:`main`, where a missing module becomes one line naming the
extra to install instead of a traceback. Each command group lives in its own module (``run``,
``chat``, ``approvals``/``approve``/``deny``, ``sessions``/``show``/``state``, ``worker``,
``dev``, ``serve``, ``demo``); failures end a command
through :func:`durable_agent.cli.render.guard` with the exit codes listed there.

Every command that talks to Temporal takes ``--address``, ``--namespace`` and ``--profile`` and
reads the ``temporal`` CLI's variables and profiles; with no address anywhere it finds a running
``durable-agent dev`` server by itself. Store commands take ``--store``; ``-v`` says which Temporal
server and store are used.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["EXTRAS", "command", "main", "missing_extra"]

EXTRAS = {
    "typer": "cli",
    "click": "cli",
    "rich": "cli",
    "temporalio": "temporal",
    "pymongo": "mongo",
    "bson": "mongo",
    "motor": "motor",
    "openai": "openai",
    "anthropic": "anthropic",
    "cryptography": "encryption",
    "opentelemetry": "otel",
    "fastapi": "server",
    "starlette": "server",
    "uvicorn": "server",
    "sse_starlette": "server",
    "ag_ui": "server",
}
"""Top-level module -> the extra of ``durable-agent`` that installs it."""


def missing_extra(exc: ImportError) -> str | None:
    """The one-line message for a module an extra provides, or None for any other import error.

    A missing ``cli`` or ``temporal`` module asks for the ``cli`` extra (it brings the Temporal
    SDK too); a store's or provider's module names its own extra. The install line is spelled as
    the README installs: from a clone, ``'.[extra]'``.
    """
    name = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return None
    install = "cli" if extra in ("cli", "temporal") else extra
    return (
        f"the {extra!r} extra of durable-agent is not installed (no module named {name!r}): "
        f"pip install '.[{install}]' (from the durable-agent clone)"
    )


def command() -> typer.Typer:
    """The typer app with every subcommand (imported here: see the module docstring)."""
    import logging

    import typer

    from . import approvals, chat, demo, dev, run, serve, sessions, worker
    from .render import LastResort, UsageGroup

    logging.lastResort = LastResort()  # the library's warnings, as the CLI's errors show

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
        cls=UsageGroup,
    )
    for each in (
        demo.demo,
        dev.dev,
        serve.serve,
        worker.worker,
        run.run,
        sessions.show,
        sessions.state,
        chat.chat,
        approvals.approvals,
        approvals.approve,
        approvals.deny,
    ):
        cli.command()(each)
    cli.add_typer(sessions.sessions_cli, name="sessions")
    _add_version(cli)
    return cli


def _add_version(cli: typer.Typer) -> None:
    """``--version``: which release this is, to match workers and clients (a worker replays only
    the runs its own release started, see README.md#upgrading-from-01)."""
    import typer

    from .. import __version__

    def show(value: bool) -> None:
        if value:
            typer.echo(f"durable-agent {__version__}")
            raise typer.Exit()

    @cli.callback()
    def options(
        version: bool = typer.Option(
            False, "--version", callback=show, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        del version  # handled by its callback, before any command runs


def main() -> None:
    """Run the command and exit with its code. A missing extra, at import or later (a store's or
    a model provider's package), exits 1 with the install line. The exit is ``os._exit`` after
    flushing, because the Temporal SDK's native threads can abort a normal interpreter shutdown."""
    code = 0
    try:
        command()()
    except SystemExit as exc:
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            code = 1
    except ImportError as exc:
        message = missing_extra(exc) or (str(exc) if "pip install" in str(exc) else None)
        if message is None:
            traceback.print_exception(exc)
        else:
            print(f"error: {message}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:  # Ctrl-C before a command's own guard (loading its parts)
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:  # a bug: show it, fail
        traceback.print_exception(exc)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
