"""How MongoStore writes one batch: reserve numbers, insert, resolve duplicate keys, roll back.

The contract (what a failed append leaves) is documented in :mod:`durable_agent.stores.mongo`;
this module is the mechanism. The common case is two round trips and no lookup: one
``find_one_and_update`` reserving ``seq`` numbers, one ordered ``insert_many``. Only a duplicate
key leads to lookups, and only a conflict to a delete.

**Servers whose ``$inc`` is not atomic.** FerretDB 1.x implements ``findAndModify`` and
``update`` as a read followed by a write with no transaction around them (FerretDB issues #2168,
#3040): concurrent increments are lost, two writers can be handed the same numbers, and the
counter can move backwards. Overlapping numbers are caught by the ``(session_id, seq)`` unique
index and retried above the collision. A counter that went backwards could still place a
writer's next entry *before* its previous one, so each store object also keeps a floor per
session (:class:`SeqFloors`), one past the highest ``seq`` it has written or loaded, and never
uses a number below it: a writer's appends get increasing numbers. On MongoDB the counter is
always ahead of every stored ``seq`` and the floor never changes anything.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, OperationFailure

from ..session.appendplan import plan_append
from ..session.entries import Entry
from ..session.errors import (
    CorruptSessionError,
    EntryConflictError,
    SessionNotFoundError,
    StoreUnavailableError,
)

__all__ = [
    "BatchWriter",
    "SeqFloors",
    "entry_key",
    "first_error_index",
    "only_duplicate_keys",
    "reserve_seq",
]

_DUPLICATE_KEY = 11000
_TYPE_MISMATCH = 14  # e.g. $inc on a next_seq that is not a number

#: Rounds of "reserve, insert, hit a duplicate key" before an append gives up. Each round past
#: the first means another writer stored entries, so this is reached only under pathological
#: contention.
_MAX_WRITE_ROUNDS = 50

#: After a duplicate key, up to this many IDs are checked with concurrent primary-key lookups
#: (FerretDB's SQLite backend pushes only ``_id`` equality down to SQL and scans the whole
#: collection for any other filter); more (forks, imports) with one ``$in`` query.
_POINT_LOOKUP_LIMIT = 32

#: Sessions whose sequence floor a store object remembers (least recently used are dropped).
_FLOOR_CACHE_SIZE = 4096

_Batch = list[tuple[Entry, str]]


def entry_key(session_id: str, entry_id: str) -> str:
    """An entry document's ``_id``: unique per session and entry, found by primary-key lookup."""
    return f"{session_id}/{entry_id}"


def first_error_index(exc: BulkWriteError) -> int:
    """How many documents an ordered insert stored before it stopped: its first error's index."""
    return min(int(err.get("index", 0)) for err in exc.details["writeErrors"])


def only_duplicate_keys(exc: BulkWriteError) -> bool:
    """True if every error in a bulk insert is a duplicate key (an entry or number taken)."""
    details = exc.details
    errors = details.get("writeErrors") or []
    return (
        bool(errors)
        and not details.get("writeConcernErrors")
        and all(err.get("code") == _DUPLICATE_KEY for err in errors)
    )


class SeqFloors(OrderedDict[str, int]):
    """Per session, one past the highest ``seq`` this store object wrote or loaded (LRU-bounded)."""

    def raise_to(self, session_id: str, floor: int) -> None:
        self[session_id] = max(floor, self.get(session_id, 0))
        self.move_to_end(session_id)
        while len(self) > _FLOOR_CACHE_SIZE:
            self.popitem(last=False)


async def reserve_seq(
    sessions: Any, floors: SeqFloors, sid: str, count: int, above: int = 0
) -> int:
    """Reserve ``count`` sequence numbers; the first one, never below this object's floor
    nor ``above`` (the counter is ahead of both on MongoDB, not always on FerretDB)."""
    try:
        reserved = await sessions.find_one_and_update(
            {"_id": sid},
            {"$inc": {"next_seq": count}},
            return_document=ReturnDocument.BEFORE,
        )
    except OperationFailure as exc:
        if exc.code != _TYPE_MISMATCH:
            raise
        raise CorruptSessionError(sid, f"bad session document: {exc}") from exc
    if reserved is None:
        raise SessionNotFoundError(sid)
    first = max(int(reserved.get("next_seq", 0)), floors.get(sid, 0), above)
    # Claim the block locally at once, so concurrent appends through this object never
    # pick overlapping numbers even when the server's counter lost an increment.
    floors.raise_to(sid, first + count)
    return first


class BatchWriter:
    """Writes encoded, de-duplicated batches into the two collections of one MongoStore."""

    def __init__(self, sessions: Any, entries: Any, floors: SeqFloors) -> None:
        self._sessions = sessions
        self._entries = entries
        self._floors = floors

    async def write(self, sid: str, todo: _Batch) -> None:
        """Reserve ``len(todo)`` sequence numbers and insert; resolve duplicate keys.

        A duplicate key means the entry is already stored (a retry, a concurrent writer, or a
        conflict) or, on a server whose ``$inc`` is not atomic, that the number was handed out
        twice. An ordered insert stops at the first error, so the entries before it are ours and
        stored; the rest is re-planned against what is stored: identical content is skipped,
        different content rolls back what this call inserted and raises ``EntryConflictError``,
        and whatever is still missing goes in the next round, on the unused numbers of this
        call's block when that keeps the batch in order (the usual retry of a batch an earlier
        call left a prefix of: no second reservation), else on fresh ones.
        """
        ours: list[str] = []  # _ids of the documents this call inserted
        block = range(0)  # reserved numbers this call has not used yet
        above = 0  # the next numbers must be at least this: above entries found stored
        for _ in range(_MAX_WRITE_ROUNDS):
            if len(block) < len(todo):
                first = await self._reserve(sid, len(todo), above)
                block = range(first, first + len(todo))
            keys = [entry_key(sid, entry.id) for entry, _ in todo]
            docs = [
                {
                    "_id": keys[offset],
                    "session_id": sid,
                    "entry_id": entry.id,
                    "seq": block[offset],
                    "type": entry.type,
                    "created_at": entry.created_at,
                    "wire": wire,
                }
                for offset, (entry, wire) in enumerate(todo)
            ]
            try:
                await self._entries.insert_many(docs, ordered=True)
            except BulkWriteError as exc:
                if not only_duplicate_keys(exc):
                    raise
                race = exc
            else:
                return
            stop = first_error_index(race)
            ours.extend(keys[:stop])
            rest = todo[stop:]
            try:
                todo, highest = await self._unstored(sid, rest)
            except EntryConflictError:
                await self._roll_back(sid, ours)
                raise
            if not todo:
                return
            # The numbers from the collided entry's on are still ours when that entry is stored
            # (its number went unused) and everything stored sits below them (a prefix left
            # by an earlier call): the next round needs no reservation. Otherwise (a number
            # taken twice by a counter that is not atomic, or a concurrent copy of this batch
            # that stored entries above our numbers) it reserves fresh ones, above them all.
            entry_was_stored = todo[0][0] is not rest[0][0]
            below = highest is not None and highest < block[stop]
            block = block[stop:] if entry_was_stored and below else range(0)
            if highest is not None:
                above = max(above, highest + 1)
        raise StoreUnavailableError(
            f"session {sid!r}: append kept colliding with concurrent writers "
            f"({_MAX_WRITE_ROUNDS} rounds)"
        ) from race

    async def _reserve(self, sid: str, count: int, above: int = 0) -> int:
        return await reserve_seq(self._sessions, self._floors, sid, count, above)

    async def _unstored(self, sid: str, rest: _Batch) -> tuple[_Batch, int | None]:
        """The part of ``rest`` (its first entry hit a duplicate key) that is not stored yet, and
        the highest ``seq`` among the stored ones (``None`` if none or not a number).

        Raises ``EntryConflictError`` if one of them is stored with other content.
        """
        rest_ids = [entry.id for entry, _ in rest]
        stored = await self._stored(sid, {"_id": {"$in": [entry_key(sid, e) for e in rest_ids]}})
        if not stored:
            # No ID of ours is stored under its usual _id: the number collided (the next round
            # takes new ones), or another program stored the entry under a different _id,
            # which only the (session_id, entry_id) index finds.
            stored = await self._stored(sid, {"session_id": sid, "entry_id": {"$in": rest_ids}})
        remaining = plan_append(sid, rest, lambda eid: stored[eid][0] if eid in stored else None)
        seqs = [seq for _, seq in stored.values()]
        highest = max(seqs) if seqs and all(isinstance(n, int) for n in seqs) else None
        return remaining, highest

    async def _stored(self, sid: str, query: dict[str, Any]) -> dict[str, tuple[str, Any]]:
        """``{entry_id: (wire, seq)}`` of the stored entries ``query`` matches.

        An ``_id`` ``$in`` query with up to ``_POINT_LOOKUP_LIMIT`` keys is sent as concurrent
        primary-key lookups (the only filter FerretDB's SQLite backend pushes down).
        """
        projection = {"_id": 0, "entry_id": 1, "wire": 1, "seq": 1}
        keys = query.get("_id", {}).get("$in")
        if keys is not None and len(keys) <= _POINT_LOOKUP_LIMIT:
            found = await asyncio.gather(
                *(self._entries.find_one({"_id": key}, projection) for key in dict.fromkeys(keys))
            )
            docs = [doc for doc in found if doc is not None]
        else:
            docs = [doc async for doc in self._entries.find(query, projection)]
        return {doc["entry_id"]: (doc["wire"], doc.get("seq")) for doc in docs}

    async def _roll_back(self, sid: str, keys: list[str]) -> None:
        """Delete the documents this call inserted before it found a conflict (SPEC §2.1)."""
        if keys:
            await self._entries.delete_many({"_id": {"$in": keys}, "session_id": sid})
