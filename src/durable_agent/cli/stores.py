"""The store a command names, and the store's identity.

A store is named by a spec, ``file:PATH`` or a ``mongodb://`` / ``mongodb+srv://`` URI, from
``--store``, else ``DURABLE_AGENT_STORE``, else ``MONGODB_URI``, else a FileStore under the data
directory, so that every command and the worker agree on one store without flags. Listing and
deleting go through the store's own ``list_sessions`` / ``delete_session``
(:class:`~durable_agent.session.RetentionStore`), which read records only.

Comparing specs cannot tell whether a worker uses the client's store: a worker in a container
reaches the same MongoDB as ``mongodb://mongo:27017`` that the host calls
``mongodb://localhost:27017``, and two paths can name one directory. So the store itself carries a
random ID: a marker file in a FileStore's directory, a document in a MongoStore's database
(``durable-agent worker`` puts it in its Temporal identity, see :mod:`.worker`). A store other
than these two has no ID and nothing is compared.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..session import RetentionStore, Store, StoreUnavailableError
from ..stores import FileStore
from ..workflows.config import data_dir
from .config import ENV_MONGODB_DB, ENV_MONGODB_URI, ENV_STORE, TARGET, UsageError

__all__ = [
    "OpenedStore",
    "StoreSpecError",
    "display_store",
    "mongo_unreachable",
    "open_store",
    "resolve_store_spec",
    "retention",
]

DEFAULT_MONGODB_DB = "durable_agent"


class StoreSpecError(UsageError):
    """A store spec the CLI cannot open (bad scheme, missing extra)."""


# -- opening the store named by a spec ------------------------------------------------------------

_USERINFO = re.compile(r"^(mongodb(?:\+srv)?://)([^@/]*)@")


def display_store(spec: str) -> str:
    """A store spec fit to print: a MongoDB password is masked."""

    def mask(match: re.Match[str]) -> str:
        user = match.group(2).split(":", 1)[0]
        return f"{match.group(1)}{user}:***@" if ":" in match.group(2) else match.group(0)

    return _USERINFO.sub(mask, spec)


def resolve_store_spec(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The store spec in force: the flag, then the environment, then the default FileStore."""
    env = os.environ if env is None else env
    for candidate in (flag, env.get(ENV_STORE), env.get(ENV_MONGODB_URI)):
        if candidate:
            return candidate
    return f"file:{data_dir(env) / 'sessions'}"


@dataclass
class OpenedStore:
    """A store and what to release when the command is done with it."""

    store: Store
    spec: str
    client: Any = None

    async def close(self) -> None:
        if self.client is not None:
            result = self.client.close()
            if hasattr(result, "__await__"):
                await result


def _mongo_database_name(uri: str, env: Mapping[str, str]) -> str:
    try:
        from pymongo.uri_parser import parse_uri
    except ImportError as exc:  # pragma: no cover - the mongo extra is missing
        raise StoreSpecError("a mongodb:// store needs PyMongo: pip install '.[mongo]'") from exc
    try:
        parsed = parse_uri(uri)
    except Exception as exc:
        raise StoreSpecError(f"invalid MongoDB URI: {exc}") from exc
    return str(parsed.get("database") or env.get(ENV_MONGODB_DB) or DEFAULT_MONGODB_DB)


def mongo_unreachable(spec: str, exc: BaseException) -> StoreUnavailableError:
    """One line instead of PyMongo's topology dump: ``cannot reach MongoDB at host:port (why)``."""
    try:
        from pymongo.uri_parser import parse_uri

        hosts = ", ".join(f"{h}:{p}" for h, p in parse_uri(spec)["nodelist"])
    except Exception:
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
        name = _mongo_database_name(spec, env)
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
