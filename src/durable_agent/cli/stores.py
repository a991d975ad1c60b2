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

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..session import RetentionStore, Store, StoreUnavailableError, new_id
from ..stores import FileStore
from ..workflows.config import data_dir
from .config import ENV_MONGODB_DB, ENV_MONGODB_URI, ENV_STORE, TARGET, UsageError

__all__ = [
    "MARKER",
    "META_COLLECTION",
    "OpenedStore",
    "StoreSpecError",
    "display_store",
    "mongo_unreachable",
    "open_store",
    "resolve_store_spec",
    "retention",
    "store_id",
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


# -- the store's identity -------------------------------------------------------------------------

MARKER = ".durable-agent-store-id"
"""The marker file in a FileStore's directory (stores list only ``*.jsonl`` files)."""
META_COLLECTION = "durable_agent_meta"
"""The MongoDB collection holding ``{_id: "store_id", value: <id>}``."""


def _file_id(store: FileStore, create: bool) -> str | None:
    path = store.root / MARKER
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip() or None
    if not create:
        return None
    store.root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another process won the race: use its ID
        return path.read_text().strip() or None
    with os.fdopen(fd, "w") as out:
        out.write(new_id() + "\n")
        out.flush()
        os.fsync(out.fileno())
    return path.read_text().strip()


async def _mongo_id(database: object, create: bool) -> str | None:
    collection = database.get_collection(META_COLLECTION)  # type: ignore[attr-defined]
    doc = await collection.find_one({"_id": "store_id"})
    if doc is None and create:
        from pymongo.errors import DuplicateKeyError

        with contextlib.suppress(DuplicateKeyError):
            await collection.insert_one({"_id": "store_id", "value": new_id()})
        doc = await collection.find_one({"_id": "store_id"})
    return str(doc["value"]) if doc is not None else None


async def store_id(store: Store, *, create: bool) -> str | None:
    """The store's ID; ``create`` makes one if it has none. None for stores without one."""
    if isinstance(store, FileStore):
        return _file_id(store, create)
    database = getattr(store, "database", None)
    if database is not None and hasattr(database, "get_collection"):
        return await _mongo_id(database, create)
    return None
