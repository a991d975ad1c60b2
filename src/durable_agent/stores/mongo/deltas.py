"""The live-delta channel of a MongoStore: one small collection next to the store's own
(docs/design.md#live-deltas; reached as ``MongoStore.live_deltas()``).

One document per published delta, ``{_id: "<key>/<attempt>/<seq>", k: "<key>", at, d}``, with
attempt and seq zero-padded so ``_id`` order is ``(attempt, seq)`` order. An index on ``k`` finds a
reply's deltas, a TTL index on ``at`` expires what a crashed worker never cleared (FerretDB has no
TTL indexes: there the first delta of each reply deletes the expired ones); a stored reply's
deltas are deleted by the worker shortly after it stores the message. The collection therefore
only holds replies being streamed, which also keeps FerretDB (which scans for non-``_id``
filters) fast (docs/design.md#live-deltas). A reply's delta is followed by a primary-key read of
its session document: a delta written after its session was deleted (by a run still streaming)
is removed at once (docs/design.md#retention).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import ASCENDING
from pymongo.errors import OperationFailure

from ...session.deltas import Cursor, Delta, DeltaKey
from ...session.errors import SessionNotFoundError
from ...session.ids import validate_session_id
from .decode import servers_of, translate_errors
from .incarnation import id_range

__all__ = ["DEFAULT_COLLECTION", "DEFAULT_TTL", "MongoDeltas"]

DEFAULT_COLLECTION = "live_deltas"
DEFAULT_TTL = 600
"""Seconds after which a never-cleared delta expires (a worker killed mid-stream)."""


_NOT_IMPLEMENTED = 238


def _doc_id(key: str, attempt: int, seq: int) -> str:
    return f"{key}/{attempt:06d}/{seq:09d}"


class MongoDeltas:
    """Deltas in ``database[collection]``; indexes are created on first use."""

    def __init__(
        self,
        database: Any,
        *,
        collection: str = DEFAULT_COLLECTION,
        ttl: int = DEFAULT_TTL,
        sessions: Any = None,
    ) -> None:
        self._coll = database.get_collection(collection)
        self._sessions = sessions
        """The store's session documents: a reply's delta is kept only while its session is."""
        self._ttl = ttl
        self._indexed = False
        self._sweep = False
        """No TTL index on this server: publishing sweeps expired deltas itself."""
        self._lock = asyncio.Lock()
        self._database = database

    def _errors(self, key: str) -> contextlib.AbstractContextManager[None]:
        """A server out of reach, or a client closed, as the store's typed errors."""
        return translate_errors(f"live deltas of {key}", lambda: servers_of(self._database))

    async def _ensure_indexes(self) -> None:
        if self._indexed:
            return
        async with self._lock:
            if not self._indexed:
                await self._coll.create_index([("k", ASCENDING)], name="k")
                try:
                    await self._coll.create_index("at", name="at_ttl", expireAfterSeconds=self._ttl)
                except OperationFailure as exc:
                    if exc.code != _NOT_IMPLEMENTED:
                        raise
                    self._sweep = True
                self._indexed = True

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        name = key.name()
        with self._errors(name):
            await self._ensure_indexes()
            now = datetime.now(UTC)
            if self._sweep and delta.seq == 1:
                await self._coll.delete_many({"at": {"$lt": now - timedelta(seconds=self._ttl)}})
            await self._coll.insert_one(
                {
                    "_id": _doc_id(name, delta.attempt, delta.seq),
                    "k": name,
                    "at": now,
                    "d": delta.model_dump_json(),
                }
            )
            if key.turn and self._sessions is not None:
                await self._kept(key)

    async def _kept(self, key: DeltaKey) -> None:
        """Remove the reply's deltas and raise ``SessionNotFoundError`` when its session
        document is gone: the delete removes the document before the deltas, so a write it did
        not see is found here (docs/design.md#retention). A cancel note (turn 0, no text) is
        not checked: it stops the deleted session's calls."""
        if await self._sessions.find_one({"_id": key.session_id}, {"_id": 1}) is None:
            await self._coll.delete_many({"k": key.name()})
            raise SessionNotFoundError(key.session_id)

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        name = key.name()
        query = {"k": name, "_id": {"$gt": _doc_id(name, *after)}}
        with self._errors(name):
            docs = await self._coll.find(query, {"d": 1}).sort("_id", ASCENDING).to_list(None)
        return [Delta.model_validate_json(doc["d"]) for doc in docs]

    async def held(self, keys: list[DeltaKey]) -> set[DeltaKey]:
        """Which of ``keys`` hold any delta, in one query (a worker watching the cancel notes of
        all its calls in flight asks this a few times a second)."""
        if not keys:
            return set()
        names = {k.name(): k for k in keys}
        with self._errors(f"{len(keys)} calls"):
            docs = self._coll.find({"k": {"$in": list(names)}}, {"k": 1, "_id": 0})
            return {names[doc["k"]] async for doc in docs}

    async def clear(self, key: DeltaKey) -> None:
        with self._errors(key.name()):
            await self._coll.delete_many({"k": key.name()})

    async def drop_session(self, session_id: str) -> None:
        """Every reply's deltas of a deleted session (docs/design.md#retention): an ``_id``
        range, ``<session_id>/…`` (an ID with a ``/`` would reach into another's)."""
        scope = id_range(validate_session_id(session_id))
        with self._errors(f"session {session_id!r}"):
            await self._coll.delete_many({"_id": scope})

    async def size(self) -> int:
        """Documents held (the bench's bound check)."""
        count: int = await self._coll.count_documents({})
        return count
