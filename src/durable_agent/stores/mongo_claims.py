"""Entry-ID claims: a per-session set of ID hashes that proves a batch is new without a lookup.

The batch layout (:mod:`durable_agent.stores.mongo_batch`) cannot find an entry that is not first
in its document by primary key, and FerretDB pushes nothing but ``_id`` equality down to SQL:
any other lookup scans the whole collection, once per append. So each session has one claims
document, ``{_id: session_id, h: [hash, ...]}`` (collection ``<entries>_ids``), holding a 64-bit
hash of every entry ID stored in the session. An append first runs one conditional update,
``{_id, h: {$nin: hashes}} -> {$push: {h: {$each: hashes}}}``, alongside the ``seq`` reservation:
if it matched, none of the batch's IDs is stored and they are now claimed, so the batch is
inserted at once (no lookup). If it did not match (an ID, or a hash collision, is already
claimed; or the session has no claims document yet), the append takes the careful path:
it looks the IDs up, claims what it will write, then inserts.

The invariant is "stored implies claimed": claims are written before the entries, and a claim
whose insert then failed only sends a later append down the careful path. A session written
before claims existed (no claims document) gets one on its first careful append, built from its
stored IDs. On MongoDB the conditional update is atomic; on FerretDB 1.x (update is a read and a
write without a transaction) two concurrent writers can lose a claim, which leaves the window
the batch layout documents for racing writers there.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable
from typing import Any

from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import DuplicateKeyError

__all__ = ["Claims", "id_hash"]


def id_hash(entry_id: str) -> int:
    """A signed 64-bit hash of an entry ID (stable across processes and versions)."""
    digest = hashlib.blake2b(entry_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class Claims:
    """The claims documents of one MongoStore (module doc)."""

    def __init__(self, collection: Any) -> None:
        raw: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)
        self._collection = collection.with_options(codec_options=raw)

    async def create(self, sid: str) -> None:
        """An empty claims document for a session just created (an existing one is kept)."""
        with contextlib.suppress(DuplicateKeyError):
            await self._collection.insert_one({"_id": sid, "h": []})

    async def claim_new(self, sid: str, entry_ids: Iterable[str]) -> bool:
        """Claim the IDs if none of them is claimed yet; ``False`` means "take the careful
        path" (one is claimed, or the session has no claims document)."""
        hashes = list(dict.fromkeys(id_hash(eid) for eid in entry_ids))
        # findAndModify, not update: FerretDB answers it several times faster (about 1.5 ms
        # against 6 ms on the bench machine). It returns the whole document (FerretDB has no
        # projection here); the collection's raw-BSON codec leaves it undecoded.
        found = await self._collection.find_one_and_update(
            {"_id": sid, "h": {"$nin": hashes}}, {"$push": {"h": {"$each": hashes}}}
        )
        return found is not None

    async def claim(self, sid: str, entry_ids: Iterable[str], stored_ids: Any) -> None:
        """Claim the IDs unconditionally (the careful path, before its insert). A session with
        no claims document gets one holding every ID ``stored_ids()`` returns and these."""
        hashes = list(dict.fromkeys(id_hash(eid) for eid in entry_ids))
        update = {"$addToSet": {"h": {"$each": hashes}}}
        if await self._collection.find_one_and_update({"_id": sid}, update) is not None:
            return
        existing = [id_hash(eid) for eid in await stored_ids()]
        with contextlib.suppress(DuplicateKeyError):  # else a concurrent writer built it
            await self._collection.insert_one({"_id": sid, "h": list(dict.fromkeys(existing))})
        await self._collection.update_one({"_id": sid}, update)

    async def delete(self, sid: str) -> None:
        await self._collection.delete_one({"_id": sid})
