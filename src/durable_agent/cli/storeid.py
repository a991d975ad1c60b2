"""A store's identity, so a client can tell that the worker it talks to uses another store.

Comparing store specs does not work: a worker in a container reaches the same MongoDB as
``mongodb://mongo:27017`` that the host calls ``mongodb://localhost:27017``, and two paths can
name one directory. So the store itself carries a random ID: a marker file in a FileStore's
directory, a document in a MongoStore's database. ``durable-agent worker`` creates it and puts it
in its Temporal worker identity (``... store:<id>``), which Temporal reports for the task
queue's pollers; a client reads its own store's ID and compares. A store other than these two, or
a worker not started by this CLI, has no ID and nothing is compared.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Iterable

from ..session.ids import new_id
from ..session.store import Store
from ..stores.file import FileStore

__all__ = ["MARKER", "META_COLLECTION", "mismatch", "store_id", "worker_identity"]

MARKER = ".durable-agent-store-id"
"""The marker file in a FileStore's directory (stores list only ``*.jsonl`` files)."""
META_COLLECTION = "durable_agent_meta"
"""The MongoDB collection holding ``{_id: "store_id", value: <id>}``."""

_IN_IDENTITY = re.compile(r"\bstore:([0-9a-f]{16})\b")


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


def worker_identity(sid: str | None) -> str:
    """Temporal's default identity (``pid@host``), plus the store's ID when there is one."""
    base = f"{os.getpid()}@{socket.gethostname()}"
    return f"{base} store:{sid}" if sid else base


def mismatch(own: str | None, identities: Iterable[str]) -> bool:
    """Whether workers that advertise a store ID all advertise another one than ``own``."""
    advertised = {m.group(1) for i in identities if (m := _IN_IDENTITY.search(i))}
    return bool(advertised) and own not in advertised
