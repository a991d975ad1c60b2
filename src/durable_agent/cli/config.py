"""What a command is pointed at and what every command shares: the environment it reads, the data
directory, the Temporal server, the options, and the failures with their exit codes.

Every variable the worker and the other commands read is named here once, so
``docker-compose.yml`` and its test can be checked against this module rather than against prose.
Temporal comes from ``--address``/``--namespace``/``--profile``, then the ``temporal`` CLI's
variables and profiles, then a running ``durable-agent dev``, then ``localhost:7233``. Each command
records in :data:`TARGET` what it resolved (this Temporal server, the store in :mod:`.stores`):
errors always print it and ``-v`` prints it up front.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer
from temporalio.client import Client

from ..workflows import connect_from_env
from ..workflows.config import ConnectSettings, resolve_connect_settings
from .processes import read_server_info

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "DEMO_APP",
    "ENV_APP",
    "ENV_DATA_DIR",
    "ENV_MODEL",
    "ENV_MONGODB_DB",
    "ENV_MONGODB_URI",
    "ENV_STORE",
    "ENV_TASK_QUEUE",
    "TARGET",
    "TEMPORAL_ENV",
    "WORKER_ENV",
    "AddressOpt",
    "AgentOpt",
    "CommandError",
    "JsonOpt",
    "NamespaceOpt",
    "NotFound",
    "ProfileOpt",
    "QueueOpt",
    "StoreOpt",
    "Target",
    "TemporalFlags",
    "UsageError",
    "VerboseOpt",
    "client_env",
    "connect",
    "data_dir",
    "queue_for",
    "temporal_env",
]

ENV_STORE = "DURABLE_AGENT_STORE"
"""``file:PATH`` or a ``mongodb://`` URI; beats ``MONGODB_URI``."""
ENV_MONGODB_URI = "MONGODB_URI"
"""A MongoDB URI, used when ``DURABLE_AGENT_STORE`` is unset."""
ENV_MONGODB_DB = "DURABLE_AGENT_MONGODB_DB"
"""The database name when the URI has none (default ``durable_agent``)."""
ENV_TASK_QUEUE = "DURABLE_AGENT_TASK_QUEUE"
"""The task queue workers poll and clients start runs on (default ``durable-agent``)."""
ENV_APP = "DURABLE_AGENT_APP"
"""The worker's ``--app`` when the flag is not given (handy in containers)."""
ENV_DATA_DIR = "DURABLE_AGENT_DATA_DIR"
"""Overrides the data directory (default ``${XDG_DATA_HOME:-~/.local/share}/durable-agent``)."""
ENV_MODEL = "DURABLE_AGENT_MODEL"
"""The demo app's model spec (``openai:gpt-4.1-mini``...); unset means pick from the API keys."""

TEMPORAL_ENV = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_TLS_CERT",
    "TEMPORAL_TLS_KEY",
    "TEMPORAL_API_KEY",
)
"""What :func:`durable_agent.workflows.connect_from_env` reads."""

WORKER_ENV = frozenset(
    {
        *TEMPORAL_ENV,
        ENV_STORE,
        ENV_MONGODB_URI,
        ENV_MONGODB_DB,
        ENV_TASK_QUEUE,
        ENV_APP,
        ENV_DATA_DIR,
        ENV_MODEL,
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OLLAMA_BASE_URL",
    }
)
"""Every environment variable ``durable-agent worker`` (and the demo app it loads) reads."""

DEFAULT_TASK_QUEUE = "durable-agent"
DEMO_APP = "durable_agent.cli.demo_app:app"
"""The app ``demo`` and (without ``--app``) ``dev`` serve."""


class CommandError(Exception):
    """A failure the command reports as one ``error:`` line; ``exit_code`` says which kind."""

    exit_code = 1


class UsageError(CommandError, ValueError):
    """A command-line argument that cannot be used (exit code 2)."""

    exit_code = 2


class NotFound(CommandError):
    """A session, entry or run the command was pointed at does not exist (exit code 3)."""

    exit_code = 3


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory (XDG), created on first use by whoever writes there."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_DATA_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "durable-agent"


# -- Temporal -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TemporalFlags:
    """``--address``, ``--namespace`` and ``--profile``; each beats its environment variable."""

    address: str | None = None
    namespace: str | None = None
    profile: str | None = None


@dataclass
class Target:
    """What the running command talks to (one command per process)."""

    temporal: str | None = None
    store: str | None = None
    echo: Callable[[str], None] | None = None
    """Set by ``-v``: called with each line as soon as it is resolved."""

    def set_temporal(self, description: str) -> None:
        self.temporal = description
        if self.echo is not None:
            self.echo(f"using Temporal {description}")

    def set_store(self, description: str) -> None:
        self.store = description
        if self.echo is not None:
            self.echo(f"using store {description}")

    def lines(self) -> list[str]:
        out = []
        if self.temporal is not None:
            out.append(f"Temporal {self.temporal}")
        if self.store is not None:
            out.append(f"store {self.store}")
        return out


TARGET = Target()


def temporal_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for ``connect_from_env``: ``TEMPORAL_ADDRESS`` if set, else the address
    of a running ``durable-agent dev`` server, else the SDK default."""
    merged = dict(os.environ if env is None else env)
    if not merged.get("TEMPORAL_ADDRESS"):
        info = read_server_info(data_dir(merged))
        if info is not None:
            merged["TEMPORAL_ADDRESS"] = info.address
    return merged


def client_env(
    flags: TemporalFlags, env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], ConnectSettings]:
    """The environment ``connect_from_env`` gets, and the settings it resolves to.

    Flags override their variables; with no address from the flag, ``TEMPORAL_ADDRESS`` or the
    profile, a running ``durable-agent dev`` server is used, then ``localhost:7233``.
    """
    merged = dict(os.environ if env is None else env)
    for name, value in (
        ("TEMPORAL_ADDRESS", flags.address),
        ("TEMPORAL_NAMESPACE", flags.namespace),
        ("TEMPORAL_PROFILE", flags.profile),
    ):
        if value:
            merged[name] = value
    settings = resolve_connect_settings(merged)
    if settings.address_source == "default":
        info = read_server_info(data_dir(merged))
        if info is not None:
            merged["TEMPORAL_ADDRESS"] = info.address
            settings = resolve_connect_settings(merged)
            source = f"the running `durable-agent dev` (pid {info.owner_pid})"
        else:
            source = (
                "the default (no --address, TEMPORAL_ADDRESS, profile or "
                "running `durable-agent dev`)"
            )
        settings = replace(settings, address_source=source)
    if flags.address:
        settings = replace(settings, address_source="--address")
    TARGET.set_temporal(settings.describe())
    return merged, settings


async def connect(flags: TemporalFlags | None = None, *, within: float | None = None) -> Client:
    """A client as the flags, the environment, a profile or a running ``dev`` say, with a
    readable failure that names the address. A worker passes ``within``: seconds to keep retrying
    an unreachable server every half second (its containers start in any order)."""
    env, settings = client_env(flags or TemporalFlags())
    deadline = time.monotonic() + (within or 0.0)
    while True:
        try:
            return await connect_from_env(env)
        except Exception as exc:
            if time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                continue
            if within is not None:
                raise ConnectionError(
                    f"cannot reach Temporal at {settings.address}: {exc}"
                ) from exc
            raise ConnectionError(
                f"cannot reach Temporal at {settings.address} ({exc}); start one with "
                "`durable-agent dev`, or pass --address / set TEMPORAL_ADDRESS"
            ) from exc


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


# -- the options the commands share --------------------------------------------------------------

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help=(
            f"file:PATH or mongodb://... (default: ${ENV_STORE}, then $MONGODB_URI, then "
            "file:<data dir>/sessions)."
        ),
        show_default=False,
    ),
]
QueueOpt = Annotated[
    str | None,
    typer.Option(
        "--task-queue",
        help=f"Temporal task queue (default: ${ENV_TASK_QUEUE}, else '{DEFAULT_TASK_QUEUE}').",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Temporal host:port (default: $TEMPORAL_ADDRESS, the profile, a running "
        "`durable-agent dev`, then localhost:7233).",
        show_default=False,
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        help="Temporal namespace (default: $TEMPORAL_NAMESPACE, the profile, then 'default').",
        show_default=False,
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="Profile of the temporal CLI's config file (default: $TEMPORAL_PROFILE, "
        "then 'default').",
        show_default=False,
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Say which Temporal server and store are used.")
]
AgentOpt = Annotated[str, typer.Option("--agent", help="Agent name registered on the worker.")]
