"""The ``durable-agent`` command (:func:`main`, the script's entry point), and :class:`App`: what
an application hands ``durable-agent worker --app module:attr``.

The worker owns what must never travel through Temporal (model clients, keys, tool handlers), so
an application describes them in code and points the worker at it. ``attr`` may be an :class:`App`,
a dict with the same keys, or a zero-argument callable returning either (so that clients and
stores are built only in the worker process that uses them).

This module imports nothing beyond the standard library at its top level: an app module imports
:class:`App` with only the ``temporal`` extra installed, and a base install
(``pip install durable-agent``), which puts the script on PATH although the commands need the
``cli`` and ``temporal`` extras, still runs :func:`main`: the commands are imported inside it,
where a missing module becomes one line naming the extra to install instead of a traceback. Each
command group lives in its own module (``run``, ``chat``, ``approvals``/``approve``/``deny``,
``sessions``/``show``/``state``, ``worker``, ``dev``, ``serve``, ``demo``); failures end a
command through :func:`durable_agent.cli.render.guard` with the exit codes listed there.

Every command that talks to Temporal takes ``--address``, ``--namespace`` and ``--profile`` and
reads the ``temporal`` CLI's variables and profiles; with no address anywhere it finds a running
``durable-agent dev`` server by itself. Store commands take ``--store``; ``-v`` says which Temporal
server and store are used.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    from ..durable import PublisherLike
    from ..session import Store
    from ..workflows import AgentSpec

__all__ = [
    "App",
    "AppLoadError",
    "coerce_app",
    "command",
    "load_app",
    "main",
]


class AppLoadError(Exception):
    """``--app`` names nothing importable, or something that is not an App."""


@dataclass
class App:
    """A worker's definition: named agents, and optionally its store, publisher and queue.

    ``store=None`` means the store comes from the command line (``--store``, the environment or
    the default FileStore), which lets one app run against a file store in development and MongoDB
    in production without edits.
    """

    agents: Mapping[str, AgentSpec]
    store: Store | None = None
    publisher: PublisherLike | None = None
    task_queue: str | None = None
    description: str = field(default="")


def coerce_app(value: Any, where: str = "app") -> App:
    """An :class:`App` from an App, a dict of its fields, or a callable returning one."""
    # Imported here, not above: see the module docstring (the temporal extra may be missing).
    from ..workflows import AgentSpec

    if callable(value) and not isinstance(value, App):
        value = value()
    if isinstance(value, Mapping):
        unknown = set(value) - {"agents", "store", "publisher", "task_queue", "description"}
        if unknown:
            raise AppLoadError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if "agents" not in value:
            raise AppLoadError(f"{where}: a dict app needs an 'agents' mapping")
        value = App(**dict(value))
    if not isinstance(value, App):
        raise AppLoadError(
            f"{where} is a {type(value).__name__}, not a durable_agent.cli.App, a dict or a "
            "callable returning one"
        )
    if not value.agents:
        raise AppLoadError(f"{where} defines no agents")
    for name, spec in value.agents.items():
        if not isinstance(spec, AgentSpec):
            raise AppLoadError(
                f"{where}: agent {name!r} is a {type(spec).__name__}, not an AgentSpec"
            )
    return value


def _import_target(target: str) -> Any:
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise AppLoadError(f"no such file: {path}")
        name = f"_durable_agent_app_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise AppLoadError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ModuleNotFoundError as exc:  # as for a module name, below
            raise AppLoadError(f"cannot import {path}: {exc}") from exc
        return module
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise AppLoadError(f"cannot import {target!r}: {exc}") from exc


def load_app(ref: str) -> App:
    """Load ``module:attr`` (or ``path/to/file.py:attr``); ``attr`` defaults to ``app``."""
    target, _, attr = ref.rpartition(":") if ":" in ref else (ref, "", "app")
    if not target:
        raise AppLoadError(f"--app must look like module:attr, got {ref!r}")
    try:
        module = _import_target(target)
    except RuntimeError as exc:  # asyncio.run, or a loop's run_until_complete, in the loader's loop
        if "loop" not in str(exc):
            raise
        raise AppLoadError(
            f"{ref}: the module runs an event loop as it is imported ({exc}): move that call "
            'under `if __name__ == "__main__":`'
        ) from None
    value: Any = module
    for part in (attr or "app").split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppLoadError(f"{target!r} has no attribute {attr!r}") from None
    return coerce_app(value, ref)


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
    _as_prose(cli)
    _add_version(cli)
    return cli


def _as_prose(app: typer.Typer) -> None:
    """Each command's docstring as its help with the lines of a paragraph joined: rich help keeps
    a single newline, so a summary wrapped in the source broke mid-sentence in the tables. A
    command's own ``--help`` is click's plain text (:class:`~.render.PlainHelp`)."""
    import inspect

    from .render import PlainHelp

    for info in app.registered_commands:
        info.cls = PlainHelp
        doc = inspect.getdoc(info.callback) if info.help is None else None
        if doc:
            info.help = "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _as_prose(group.typer_instance)


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
