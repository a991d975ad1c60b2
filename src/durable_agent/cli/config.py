"""What a command is pointed at and what every command shares: the environment it reads, the
Temporal server, the options, and the failures with their exit codes.

Every variable the worker and the other commands read is named here once, so
``docker-compose.yml`` and its test can be checked against this module rather than against prose.
Temporal comes from the flags, then the library's chain (:func:`client_settings`). Each command
records in :data:`TARGET` what it resolved (this Temporal server, this store): errors always
print it and ``-v`` prints it up front.

A store is named by a spec (``file:PATH`` or a ``mongodb://`` URI) from ``--store``, else
``DURABLE_AGENT_STORE``, else ``MONGODB_URI``, else a FileStore under the data directory, so every
command and the worker agree on one store without flags. Specs cannot tell whether a worker uses
the client's store (a container's ``mongo:27017`` is the host's ``localhost:27017``), so the store
carries a random ID (:mod:`durable_agent.workflows.store_check`).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer
from temporalio.client import Client

from ..session import RetentionStore, Store, StoreUnavailableError
from ..session.store import Closing
from ..stores import FileStore
from ..workflows.config import (
    ENV_DATA_DIR,
    ConnectSettings,
    TemporalConnectError,
    connect_with,
    data_dir,
    read_server_info,
    resolve_connect_settings,
)
from ..workflows.worker_logs import LogFormat

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "DEMO_APP",
    "ENV_APP",
    "ENV_LOG_FORMAT",
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
    "LogFormatOpt",
    "NamespaceOpt",
    "NotFound",
    "OpenedStore",
    "ProfileOpt",
    "QueueOpt",
    "StoreOpt",
    "StoreSpecError",
    "Target",
    "TemporalFlags",
    "UsageError",
    "VerboseOpt",
    "client_settings",
    "connect",
    "display_store",
    "mongo_unreachable",
    "open_store",
    "queue_for",
    "resolve_store_spec",
    "retention",
]

ENV_STORE = "DURABLE_AGENT_STORE"
"""``file:PATH`` or a ``mongodb://`` URI; beats ``MONGODB_URI``."""
ENV_MONGODB_URI = "MONGODB_URI"
"""A MongoDB URI, used when ``DURABLE_AGENT_STORE`` is unset."""
ENV_MONGODB_DB = "DURABLE_AGENT_MONGODB_DB"
"""The database name when the URI has none (default ``durable_agent``)."""
DEFAULT_MONGODB_DB = "durable_agent"
ENV_TASK_QUEUE = "DURABLE_AGENT_TASK_QUEUE"
"""The task queue workers poll and clients start runs on (default ``durable-agent``)."""
ENV_APP = "DURABLE_AGENT_APP"
"""The worker's ``--app`` when the flag is not given (handy in containers)."""
ENV_LOG_FORMAT = "DURABLE_AGENT_LOG_FORMAT"
"""``--log-format`` (``text`` or ``json``) of ``worker``, ``serve`` and ``dev`` when not given."""
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
        ENV_LOG_FORMAT,
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


class StoreSpecError(UsageError):
    """A store spec the CLI cannot open (bad scheme, missing extra)."""


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

    def lines(self, said: str = "") -> list[str]:  # but what the error ``said`` names already
        named = (("Temporal", self.temporal), ("store", self.store))
        return [f"{w} {v}" for w, v in named if v is not None and v not in said]


TARGET = Target()


def client_settings(flags: TemporalFlags) -> ConnectSettings:
    """The settings :func:`connect` uses: the flags beat their variables, then the library's
    chain (:func:`durable_agent.workflows.config.resolve_connect_settings`: the ``temporal`` CLI's
    settings, a running ``durable-agent dev``, ``localhost:7233``)."""
    given = {"ADDRESS": flags.address, "NAMESPACE": flags.namespace, "PROFILE": flags.profile}
    merged = dict(os.environ)
    merged.update({f"TEMPORAL_{name}": value for name, value in given.items() if value})
    settings = resolve_connect_settings(merged)
    if flags.address:
        settings = replace(settings, address_source="--address")
    TARGET.set_temporal(settings.describe())
    return settings


async def connect(flags: TemporalFlags | None = None, *, within: float | None = None) -> Client:
    """A client as the flags, the environment, a profile or a running ``dev`` say; a server that
    does not answer is a :class:`TemporalConnectError` (a ``ConnectionError``: one ``error:``
    line). A worker passes ``within``: seconds to keep retrying an unreachable server every half
    second (its containers start in any order)."""
    settings = client_settings(flags or TemporalFlags())
    deadline = time.monotonic() + (within or 0.0)
    while True:
        try:
            return await connect_with(settings)
        except TemporalConnectError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


def queue_for(flag: str | None, flags: TemporalFlags | None = None) -> str:
    """Flag, environment, the queue a running ``dev`` advertises, then the default."""
    if flag:
        return flag
    if os.environ.get(ENV_TASK_QUEUE):
        return os.environ[ENV_TASK_QUEUE]
    local = not os.environ.get("TEMPORAL_ADDRESS") and not (flags and flags.address)
    if local and (info := read_server_info(data_dir())) is not None:  # a running dev's
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
LogFormatOpt = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        envvar=ENV_LOG_FORMAT,
        help="Log lines: text, or one JSON object per line.",
    ),
]


# -- the store ------------------------------------------------------------------------------------

_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)(.*)@", re.IGNORECASE | re.DOTALL)
_SECRET_OPTION = re.compile(r"([?&,%=]\w*(?:password|secret|token)\w*(?:=|:|%3A))[^&,#]*", re.I)


def display_store(spec: str) -> str:
    """A spec fit to print: a ``scheme://user:password@``'s password masked up to the last @, as
    is an option's value named for a password, secret or token (``AWS_SESSION_TOKEN``...)."""

    def mask(match: re.Match[str]) -> str:
        user, colon, _ = match.group(2).partition(":")
        return f"{match.group(1)}{user}:***@" if colon else match.group(0)

    shown, query, options = _USERINFO.sub(mask, spec).partition("?")
    return shown + query + _SECRET_OPTION.sub(r"\1***", "&" + options)[1:]


def resolve_store_spec(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The store spec in force: the flag, then the environment, then the default FileStore."""
    env = os.environ if env is None else env
    default = f"file:{data_dir(env) / 'sessions'}"
    return flag or env.get(ENV_STORE) or env.get(ENV_MONGODB_URI) or default


@dataclass
class OpenedStore:
    """A store and what to release when the command is done with it."""

    store: Store
    spec: str
    client: Any = None  # the MongoDB client open_store built for the store: closed after it

    async def close(self) -> None:
        if isinstance(self.store, Closing):
            await self.store.aclose()
        if self.client is not None:
            await self.client.close()


def _parse_mongo_uri(uri: str) -> dict[str, Any]:
    try:
        from dns.exception import DNSException
        from pymongo.uri_parser import parse_uri
    except ImportError as exc:  # pragma: no cover - the mongo extra is missing
        raise StoreSpecError("a mongodb:// store needs PyMongo: pip install '.[mongo]'") from exc
    try:
        return dict(parse_uri(uri))
    except Exception as exc:
        if isinstance(exc.__cause__, DNSException):  # mongodb+srv://'s lookup: no usage error
            raise StoreUnavailableError(
                f"cannot reach MongoDB at {urlsplit(uri).hostname} (cannot resolve it: {exc})"
            ) from exc
        raise StoreSpecError(f"invalid MongoDB URI: {exc}") from exc


def mongo_unreachable(spec: str, exc: BaseException) -> StoreUnavailableError:
    """One line instead of PyMongo's topology dump: ``cannot reach MongoDB at host:port (why)``."""
    try:
        hosts = ", ".join(f"{h}:{p}" for h, p in _parse_mongo_uri(spec)["nodelist"])
    except (StoreSpecError, StoreUnavailableError):  # a mongodb+srv:// host that stopped resolving
        hosts = "?"
    why = str(exc).split(" (configured timeouts")[0].split(", Timeout:")[0]
    for host in hosts.split(", "):
        why = why.removeprefix(f"{host}: ")
    return StoreUnavailableError(f"cannot reach MongoDB at {hosts} ({why[:200]})")


def open_store(spec: str, env: Mapping[str, str] | None = None) -> OpenedStore:
    """Build the store ``spec`` names. Opening connects nothing yet; the first call does."""
    env = os.environ if env is None else env
    TARGET.set_store(display_store(spec))
    if spec.startswith("file:"):
        root = spec[len("file:") :]
        if not root:
            raise StoreSpecError("file: store needs a directory, as in file:/path/to/sessions")
        return OpenedStore(FileStore(Path(root).expanduser()), spec)
    if spec.startswith(("mongodb://", "mongodb+srv://")):
        parsed = _parse_mongo_uri(spec)
        name = str(parsed.get("database") or env.get(ENV_MONGODB_DB) or DEFAULT_MONGODB_DB)
        from pymongo import AsyncMongoClient

        from ..stores import MongoStore

        client: AsyncMongoClient[Any] = AsyncMongoClient(spec, serverSelectionTimeoutMS=5000)
        return OpenedStore(MongoStore(client[name]), spec, client)
    raise StoreSpecError(
        f"unknown store {display_store(spec)!r}: use file:PATH or a mongodb:// URI "
        f"(flag --store, or {ENV_STORE} / {ENV_MONGODB_URI})"
    )


def retention(opened: OpenedStore) -> RetentionStore:
    """The store as a :class:`RetentionStore` (every built-in store is one), or a usage error
    naming the store that cannot list or delete sessions (an application's own store)."""
    if not isinstance(opened.store, RetentionStore):
        raise StoreSpecError(
            f"{type(opened.store).__name__} cannot list or delete sessions "
            "(it has no list_sessions/delete_session)"
        )
    return opened.store
