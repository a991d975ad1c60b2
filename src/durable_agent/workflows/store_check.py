"""Whether the workers of a task queue use the client's store (docs/design.md#temporal).

A client and a worker on different stores see different sessions: the worker would create and
fill the session in its store while the client follows an empty one in its own, and nothing
fails. So a store that can say who it is has an **ID** (:func:`store_id`: a marker file in a
FileStore's directory, a document in a MongoDB database, made by the first worker), every worker
adds it to its Temporal identity (``pid@host store:<id>``, :func:`with_store_id`), and a client
compares it with its own store's before it starts a run or a compaction (:class:`StoreCheck`),
reading the queue's pollers (a ``DescribeTaskQueue`` call, not billed) at most every
:data:`RECHECK_AFTER` seconds. A store without an ID (MemoryStore, an
application's own store), a queue without a poller yet, or workers that advertise no ID compare
nothing; a FileStore or MongoStore without an ID while the workers advertise one is another
store.

The same pollers say whether the queue's workers have a publisher (:class:`PublisherCheck`).
Lifecycle events of client verbs (``session_init`` of every ``new()``, branch, fork) reach the
worker's publisher through a publish workflow: a start and an activity, both billed, for every
event. Without a publisher the worker drops them, so a client asks first: a worker created with a
publisher says so in its identity (:data:`PUBLISHER_MARK`). A queue with no poller yet, or an
answer that cannot be had, counts as having one: an event is never dropped for want of asking.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from ..durable.errors import AgentError
from ..session.errors import StoreUnavailableError
from ..session.ids import new_id
from ..session.store import Store
from ..stores.file import FileStore
from .search import retried

__all__ = [
    "MARKER",
    "META_COLLECTION",
    "PUBLISHER_MARK",
    "RECHECK_AFTER",
    "PublisherCheck",
    "StoreCheck",
    "StoreMismatchError",
    "mismatch",
    "poller_identities",
    "store_id",
    "with_store_id",
]

MARKER = ".durable-agent-store-id"
"""The marker file in a FileStore's directory (stores list only ``*.jsonl`` files)."""
META_COLLECTION = "durable_agent_meta"
"""The MongoDB collection holding ``{_id: "store_id", value: <id>}``."""

logger = logging.getLogger("durable_agent.temporal")

PUBLISHER_MARK = "publisher"
"""The word a worker with a publisher adds to its identity."""
RECHECK_AFTER = 60.0
"""Seconds a client trusts what it found (a worker with a publisher, or on another store, that
starts meanwhile is seen after at most this long)."""

_IN_IDENTITY = re.compile(r"\bstore:([0-9a-f]{16})\b")


class StoreMismatchError(AgentError):
    """The workers on the task queue use another store than the client's: a run would be stored
    where this client cannot see it. Raised before anything is created."""


def _database(store: Store) -> Any:
    database = getattr(store, "database", None)
    return database if database is not None and hasattr(database, "get_collection") else None


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


async def _mongo_id(database: Any, create: bool) -> str | None:
    collection = database.get_collection(META_COLLECTION)
    doc = await collection.find_one({"_id": "store_id"})
    if doc is None and create:
        from pymongo.errors import DuplicateKeyError

        with contextlib.suppress(DuplicateKeyError):
            await collection.insert_one({"_id": "store_id", "value": new_id()})
        doc = await collection.find_one({"_id": "store_id"})
    return str(doc["value"]) if doc is not None else None


def has_store_id(store: Store) -> bool:
    """Whether ``store`` is of a kind that has an ID (FileStore, MongoStore)."""
    return isinstance(store, FileStore) or _database(store) is not None


async def store_id(store: Store, *, create: bool) -> str | None:
    """The store's ID; ``create`` makes one if it has none. None for stores without one.
    A store that is down raises ``StoreUnavailableError``, as its own calls do (a run start
    asks this first: an OS or driver error would reach the caller untyped)."""
    if isinstance(store, FileStore):
        try:
            return await asyncio.to_thread(_file_id, store, create)
        except OSError as exc:
            raise StoreUnavailableError(f"file store {store.root}: {exc}") from exc
    database = _database(store)
    if database is None:
        return None
    from ..stores.mongo.decode import servers_of, translate_errors  # the driver only if used

    with translate_errors("store id", lambda: servers_of(database)):
        return await _mongo_id(database, create)


def with_store_id(identity: str, sid: str | None) -> str:
    """A worker identity that advertises store ID ``sid`` (unchanged if it does already)."""
    if not sid or _IN_IDENTITY.search(identity):
        return identity
    return f"{identity} store:{sid}"


def mismatch(own: str | None, identities: Iterable[str]) -> bool:
    """Whether workers that advertise a store ID all advertise another one than ``own``."""
    advertised = {m.group(1) for i in identities if (m := _IN_IDENTITY.search(i))}
    return bool(advertised) and own not in advertised


async def poller_identities(client: Client, task_queue: str) -> list[str]:
    """The identities of the workers polling ``task_queue`` for workflow tasks right now (the
    read sent again after a transient refusal: every run start asks)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    response = await retried(lambda: client.workflow_service.describe_task_queue(request))
    return [p.identity for p in response.pollers]


class StoreCheck:
    """A client's check that the workers on ``task_queue`` use its store (module doc); a store
    that matched is trusted for :data:`RECHECK_AFTER` seconds."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self._matched: dict[int, float] = {}
        """``id()`` of the stores that matched, and when."""

    async def check(self, store: Store) -> None:
        """:class:`StoreMismatchError` if the queue's workers advertise another store's ID."""
        if not has_store_id(store):
            return
        now = asyncio.get_running_loop().time()
        checked = self._matched.get(id(store))
        if checked is not None and now - checked < RECHECK_AFTER:
            return
        try:
            identities = await poller_identities(self.client, self.task_queue)
        except RPCError:
            return  # the run's own start reports an unreachable server
        if not identities:
            return  # no worker yet: nothing to compare (the run waits for one)
        own = await store_id(store, create=False)
        if mismatch(own, identities):
            raise StoreMismatchError(
                f"the worker(s) on task queue {self.task_queue!r} use another store than this "
                f"client's {type(store).__name__}: give both the same store"
            )
        self._matched[id(store)] = now


class PublisherCheck:
    """Whether some worker polling ``task_queue`` has a publisher (module doc)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self._answer: bool | None = None
        self._asked = 0.0

    async def any(self) -> bool:
        now = asyncio.get_running_loop().time()
        if self._answer is not None and now - self._asked < RECHECK_AFTER:
            return self._answer
        try:
            identities = await poller_identities(self.client, self.task_queue)
        except RPCError as exc:
            logger.debug("could not list the pollers of %s: %s", self.task_queue, exc)
            return True
        if not identities:
            return True  # no worker yet: one with a publisher may be starting
        self._answer = any(PUBLISHER_MARK in identity.split() for identity in identities)
        self._asked = now
        return self._answer
