"""Entry-ID claims and sequence slots: small documents found by ``_id``; docs/design.md#mongo-store.

MongoStore stores one document per append, so an entry that is not first in its document has no
``_id`` of its own, and FerretDB pushes nothing but ``_id`` equality down to SQL (any other lookup
scans the whole collection). So every stored entry also has a **claim** in the claims collection
(``<entries>_claims``), and every append a **slot**, both found by primary key and never read by
a load:

- claim ``{_id: "<session_id>/<entry_id>", s: session_id, h: <16-byte hash of the wire>,
  b: <_id of the batch document that holds it>}``: ``_id`` uniqueness (enforced by every server,
  FerretDB included) makes the first claimer of an ID the one to store it; ``b`` says where to
  check that the entry really got stored (a claim is written before its entry: a claim whose
  entry never came, its writer lost, is taken over by the next writer of that ID); ``h`` is the
  claimed content's hash, for inspection and repair tools.
- slot ``{_id: "<session_id>#<seq>", s: session_id, n: count}``: the append that inserts it owns
  the numbers ``seq .. seq + n - 1``. Session IDs hold neither ``/`` nor ``#``, so slots and
  claims never collide. Slots replace a counter: a writer that knows the end of the session (it
  created, loaded or wrote it) claims the slot there with the batch's claims in **one** ordered
  ``insert_many``, slot first; if the slot is taken, another writer appended meanwhile, and the
  next candidate is that slot's end (:meth:`Claims.walk`). Slots are never deleted (an append
  that failed after claiming one leaves a harmless gap in ``seq``), so the slots of a session
  form a chain from its root, and every stored batch fills its slot exactly: the end a load
  computes is always a slot boundary.

The session document's ``next_seq`` is a slot boundary no later than the end of the chain (the
root; moved forward after a long walk), where a writer that knows nothing starts walking.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from bson.binary import Binary
from pymongo.errors import BulkWriteError

__all__ = [
    "Claim",
    "Claims",
    "claim_doc",
    "entry_key",
    "first_error_index",
    "only_duplicate_keys",
    "slot_key",
    "wire_hash",
]

_DUPLICATE_KEY = 11000

#: Walk steps after which the walker moves the session's ``next_seq`` hint to where it landed.
_HINT_AFTER_STEPS = 16

#: Up to this many claims are read (or deleted) with concurrent primary-key requests; more with
#: one ``$in`` query (a collection scan on FerretDB, but only forks and imports get there).
POINT_LIMIT = 32


def entry_key(session_id: str, entry_id: str) -> str:
    """An entry's key: its claim's ``_id``, and the ``_id`` of a batch document it is first in."""
    return f"{session_id}/{entry_id}"


def slot_key(session_id: str, seq: int) -> str:
    """A slot's ``_id``: the session and the first number of the append that owns it."""
    return f"{session_id}#{seq}"


def wire_hash(wire: str) -> bytes:
    """A 128-bit hash of an entry's exact encoding: equal hashes mean identical content."""
    return hashlib.blake2b(wire.encode("utf-8"), digest_size=16).digest()


def claim_doc(sid: str, entry_id: str, wire: str, batch_id: str) -> dict[str, Any]:
    """The claim of one entry, pointing at the batch document that will hold it."""
    return {"_id": entry_key(sid, entry_id), "s": sid, "h": Binary(wire_hash(wire)), "b": batch_id}


def first_error_index(exc: BulkWriteError) -> int:
    """How many documents an ordered insert stored before it stopped: its first error's index."""
    return min(int(err.get("index", 0)) for err in exc.details["writeErrors"])


def only_duplicate_keys(exc: BulkWriteError) -> bool:
    """True if every error in a bulk insert is a duplicate key (an ID, slot or document taken)."""
    details = exc.details
    errors = details.get("writeErrors") or []
    return (
        bool(errors)
        and not details.get("writeConcernErrors")
        and all(err.get("code") == _DUPLICATE_KEY for err in errors)
    )


class Claim:
    """A stored claim: the hash of the claimed content and the batch document meant to hold it."""

    __slots__ = ("batch_id", "digest")

    def __init__(self, doc: dict[str, Any]) -> None:
        h = doc.get("h")
        self.digest = bytes(h) if isinstance(h, bytes) else b""
        b = doc.get("b")
        self.batch_id = b if isinstance(b, str) else None


class Claims:
    """The claims collection of one MongoStore (module doc)."""

    def __init__(self, collection: Any, sessions: Any) -> None:
        self._collection = collection
        self._sessions = sessions

    async def insert(self, docs: Sequence[dict[str, Any]]) -> int:
        """Insert ``docs`` in order; how many went in before the first taken ``_id`` (all of
        them: ``len(docs)``). Any error other than a duplicate key propagates."""
        if not docs:
            return 0
        try:
            await self._collection.insert_many(list(docs), ordered=True)
        except BulkWriteError as exc:
            if not only_duplicate_keys(exc):
                raise
            return first_error_index(exc)
        return len(docs)

    async def claims(self, keys: Iterable[str]) -> dict[str, Claim]:
        """The stored claims among ``keys`` (entry keys), by key."""
        wanted = list(dict.fromkeys(keys))
        projection = {"h": 1, "b": 1}
        if len(wanted) <= POINT_LIMIT:
            found = await asyncio.gather(
                *(self._collection.find_one({"_id": key}, projection) for key in wanted)
            )
            docs = [doc for doc in found if doc is not None]
        else:
            query = {"_id": {"$in": wanted}}
            docs = [doc async for doc in self._collection.find(query, projection)]
        return {doc["_id"]: Claim(doc) for doc in docs}

    async def point_at(self, claim: dict[str, Any]) -> None:
        """Make a stored claim say what ``claim`` says (a writer taking over an entry whose first
        claimer never stored it, or moving its own into another document)."""
        await self._collection.update_one(
            {"_id": claim["_id"]}, {"$set": {"h": claim["h"], "b": claim["b"]}}
        )

    async def release(self, keys: Sequence[str]) -> None:
        """Delete claims this call made for entries it will not store (a conflict)."""
        if not keys:
            return
        if len(keys) <= POINT_LIMIT:
            for key in keys:
                await self._collection.delete_one({"_id": key})
        else:
            await self._collection.delete_many({"_id": {"$in": list(keys)}})

    async def walk(self, sid: str, seq: int, *, steps: int = 0) -> int:
        """The first slot boundary at or after the slot ``seq`` that is free right now: follow
        taken slots to their ends. A long walk moves the session's ``next_seq`` hint forward."""
        while True:
            slot = await self._collection.find_one({"_id": slot_key(sid, seq)}, {"n": 1})
            if slot is None:
                break
            n = slot.get("n")
            seq += n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
            steps += 1
        if steps > _HINT_AFTER_STEPS:
            await self._sessions.update_one({"_id": sid}, {"$max": {"next_seq": seq}})
        return seq

    async def take_slot(self, sid: str, seq: int, count: int) -> int:
        """Claim a slot of ``count`` numbers at the first free boundary from ``seq`` on."""
        while True:
            seq = await self.walk(sid, seq)
            if await self.insert([{"_id": slot_key(sid, seq), "s": sid, "n": count}]):
                return seq

    async def delete_session(self, sid: str) -> None:
        """Every claim and slot of a deleted session."""
        await self._collection.delete_many({"s": sid})
