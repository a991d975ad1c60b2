"""Entry-ID claims and the batch layout's counter: one document per session.

The batch layout (:mod:`durable_agent.stores.mongo_batch`) cannot find an entry that is not first
in its document by primary key, and FerretDB pushes nothing but ``_id`` equality down to SQL:
any other lookup scans the whole collection, once per append. So each session has one claims
document, ``{_id: session_id, n, h: [hash, ...]}`` (collection ``<entries>_ids``): ``h`` holds a
32-bit hash of every entry ID stored in the session, ``n`` is the next free ``seq``. An append's
first request is one ``findAndModify``, ``{_id, h: {$nin: hashes}} -> {$inc: {n}, $push: {h}}``:
if it matched, none of the batch's IDs is stored, they are now claimed and the numbers reserved,
so the batch is inserted at once (two writes in all, like the peer's session store). If it did
not match (an ID, or a hash collision, is already claimed; or the session has no claims
document), the append takes the careful path: it looks the IDs up, claims and reserves what it
will write, then inserts.

The invariant is "stored implies claimed": claims are written before the entries, and a claim
whose insert then failed only sends a later append down the careful path. A session written
before claims existed gets its claims document on its first careful append, built from its
stored IDs, numbered from its session document's ``next_seq`` (or past its stored ``seq``). On
MongoDB the conditional update is atomic; on FerretDB 1.x (a read and a write without a
transaction) two concurrent writers can lose a claim or an increment: the unique ``seq`` index
and each object's sequence floor keep order and lose nothing, and a lost claim leaves the window
the batch layout documents for racing writers there.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import DuplicateKeyError, OperationFailure

from ..session.errors import CorruptSessionError, SessionNotFoundError
from .mongo_append import SeqFloors

__all__ = ["Claims", "id_hash"]

_TYPE_MISMATCH = 14  # $inc on an n that is not a number


def id_hash(entry_id: str) -> int:
    """A signed 32-bit hash of an entry ID (stable across processes and versions). Small, as
    the claims document is rewritten on every append; a collision only sends an append down
    the careful path (about 1 in 400,000 new IDs in a 10k-entry session)."""
    digest = hashlib.blake2b(entry_id.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


class Claims:
    """The claims documents of one MongoStore (module doc)."""

    def __init__(self, collection: Any, floors: SeqFloors) -> None:
        raw: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)
        self._collection = collection.with_options(codec_options=raw)
        self._floors = floors

    async def create(self, sid: str) -> None:
        """An empty claims document for a session just created (an existing one is kept)."""
        with contextlib.suppress(DuplicateKeyError):
            await self._collection.insert_one({"_id": sid, "n": 0, "h": []})

    async def reserve_new(self, sid: str, entry_ids: Iterable[str], count: int) -> int | None:
        """Claim the IDs and reserve ``count`` numbers if none of the IDs is claimed yet: the
        first number, or ``None`` for "take the careful path" (an ID is claimed, or the session
        has no claims document)."""
        hashes = list(dict.fromkeys(id_hash(eid) for eid in entry_ids))
        before = await self._modify(
            sid,
            {"_id": sid, "h": {"$nin": hashes}},
            {"$inc": {"n": count}, "$push": {"h": {"$each": hashes}}},
        )
        return None if before is None else self._first(sid, before, count)

    async def reserve(
        self,
        sid: str,
        entry_ids: Iterable[str],
        count: int,
        initial: Callable[[], Awaitable[tuple[int, list[str]]]],
    ) -> int:
        """Claim the IDs and reserve ``count`` numbers unconditionally (the careful path, before
        its insert). A session with no claims document gets one first, from ``initial()``: the
        next free number and every stored ID (it raises if the session does not exist)."""
        hashes = list(dict.fromkeys(id_hash(eid) for eid in entry_ids))
        update = {"$inc": {"n": count}, "$addToSet": {"h": {"$each": hashes}}}
        before = await self._modify(sid, {"_id": sid}, update)
        if before is None:
            start, stored = await initial()
            existing = list(dict.fromkeys(id_hash(eid) for eid in stored))
            with contextlib.suppress(DuplicateKeyError):  # else a concurrent writer built it
                await self._collection.insert_one({"_id": sid, "n": start, "h": existing})
            before = await self._modify(sid, {"_id": sid}, update)
            if before is None:  # deleted meanwhile
                raise SessionNotFoundError(sid)
        return self._first(sid, before, count)

    async def _modify(self, sid: str, query: dict[str, Any], update: dict[str, Any]) -> Any:
        """``find_one_and_update`` returning the document before; a counter that is not a
        number (``$inc`` fails with a type mismatch) is a corrupt session."""
        try:
            return await self._collection.find_one_and_update(query, update)
        except OperationFailure as exc:
            if exc.code != _TYPE_MISMATCH:
                raise
            raise CorruptSessionError(sid, f"bad claims document: {exc}") from exc

    def _first(self, sid: str, before: Any, count: int) -> int:
        """The first reserved number: the counter before the ``$inc``, never below this object's
        floor (FerretDB's findAndModify is not atomic: see mongo_append)."""
        n = before.get("n", 0)
        if not isinstance(n, int) or isinstance(n, bool):
            raise CorruptSessionError(sid, f"bad claims document: n is {n!r}")
        first = max(n, self._floors.get(sid, 0))
        self._floors.raise_to(sid, first + count)
        return first

    async def delete(self, sid: str) -> None:
        await self._collection.delete_one({"_id": sid})
