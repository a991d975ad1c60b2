"""Entry-ID claims and sequence slots: small documents found by ``_id``; docs/design.md#mongo-store.

MongoStore stores one document per append, so an entry has no document of its own, and FerretDB
pushes nothing but ``_id`` equality down to SQL (any other lookup scans the whole collection). So
every stored entry also has a **claim** in the claims collection (``<entries>_claims``), and every
append a **slot**, both found by primary key and never read by a load. Both carry the session's
incarnation (:mod:`~durable_agent.stores.mongo.incarnation`), so nothing of a deleted session
collides with the session created again under its ID. The session is their ``_id``'s prefix,
which every query on them uses (``id_range``), so they hold no field of their own for it (older
ones may hold the session ID as ``s``, which nothing reads):

- claim ``{_id: "<session_id>/<incarnation>/<entry_id>", i, h: <16-byte hash of the wire>,
  q: <seq of the batch document that holds it>}``: ``_id`` uniqueness (enforced by every server,
  FerretDB included) makes the first claimer of an ID the one to store it; ``q`` says where to
  check that the entry really got stored (a claim is written before its entry). A claim whose
  document is not there is taken over only after a **fence** went in at that document's place
  (:mod:`~durable_agent.stores.mongo.writer`), so the first claimer's document can never land
  after all; ``h`` is the claimed content's hash, for inspection and repair tools.
- slot ``{_id: "<session_id>/<incarnation>#<seq>", i, n: count, t: taken at}``: the append
  that inserts it owns the numbers ``seq .. seq + n - 1``; ``t`` (the writer's clock) tells a
  reader how long the slot has waited for its document. Session IDs hold no ``/`` and
  incarnations no ``/`` or ``#``, so slots and claims never collide. Slots replace a counter: a
  writer that knows the end of the session (it created, loaded or wrote it) claims the slot there
  with the batch's claims in **one** ordered ``insert_many``, slot first; if the slot is taken,
  another writer appended meanwhile, and the next candidate is that slot's end
  (:meth:`Claims.walk`). Slots are never deleted while the session lives, so the slots of a
  session form a chain from its root, 0, without holes. An append that gives its slot up (or
  dies) leaves a gap in ``seq``: the writer fences the slot's place when it gives up, a reader
  when the slot is old (:mod:`~durable_agent.stores.mongo.tail`).

The session document's ``next_seq`` is a slot boundary no later than the end of the chain (the
root; moved forward after a long walk), where a writer that knows nothing starts walking.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from bson.binary import Binary
from pymongo.errors import BulkWriteError

from .incarnation import Scope, id_range

__all__ = [
    "Claim",
    "Claims",
    "Slot",
    "claim_doc",
    "first_error_index",
    "only_duplicate_keys",
    "slot_doc",
    "wire_hash",
]

_DUPLICATE_KEY = 11000

#: Walk steps after which the walker moves the session's ``next_seq`` hint to where it landed.
_HINT_AFTER_STEPS = 16

#: Up to this many claims are read (or deleted) with concurrent primary-key requests; more with
#: one ``$in`` query (a collection scan on FerretDB, but only forks and imports get there).
POINT_LIMIT = 32


async def find_ids(
    collection: Any, ids: Sequence[str], projection: dict[str, int], **match: Any
) -> list[dict[str, Any]]:
    """The documents of ``collection`` with these ``_id``s (found ones only): concurrent
    primary-key reads up to ``POINT_LIMIT``, else one ``$in`` query narrowed by ``match``."""
    if len(ids) <= POINT_LIMIT:
        found = await asyncio.gather(*(collection.find_one({"_id": i}, projection) for i in ids))
        return [doc for doc in found if doc is not None]
    query = {"_id": {"$in": list(ids)}, **match}
    return [doc async for doc in collection.find(query, projection)]


def wire_hash(wire: str) -> bytes:
    """A 128-bit hash of an entry's exact encoding: equal hashes mean identical content."""
    return hashlib.blake2b(wire.encode("utf-8"), digest_size=16).digest()


def claim_doc(scope: Scope, entry_id: str, wire: str, seq: int) -> dict[str, Any]:
    """The claim of one entry, pointing at the batch document (at ``seq``) that will hold it."""
    return {
        "_id": scope.key(entry_id),
        "i": scope.inc,
        "h": Binary(wire_hash(wire)),
        "q": seq,
    }


def slot_doc(scope: Scope, seq: int, count: int) -> dict[str, Any]:
    """The slot of an append of ``count`` entries numbered from ``seq``, taken now (``t``: how
    long a reader waits for its document, :mod:`~durable_agent.stores.mongo.tail`)."""
    now = datetime.now(UTC)
    taken = now.replace(microsecond=now.microsecond // 1000 * 1000)  # a BSON date's precision
    return {"_id": scope.at(seq), "i": scope.inc, "n": count, "t": taken}


class Slot(NamedTuple):
    """A stored slot: its numbers ``seq .. seq + n - 1`` and when it was taken (``None`` if the
    slot does not say)."""

    seq: int
    n: int
    taken: datetime | None


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
    """A stored claim: the hash of the claimed content and the ``seq`` of the batch document
    meant to hold it (``None`` if damaged)."""

    __slots__ = ("digest", "seq")

    def __init__(self, doc: dict[str, Any]) -> None:
        h = doc.get("h")
        self.digest = bytes(h) if isinstance(h, bytes) else b""
        q = doc.get("q")
        self.seq = q if isinstance(q, int) and not isinstance(q, bool) else None


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
        docs = await find_ids(self._collection, wanted, {"h": 1, "q": 1})
        return {doc["_id"]: Claim(doc) for doc in docs}

    async def orphans(self, scope: Scope, parents: dict[str, str]) -> dict[str, str]:
        """Of ``parents`` (entry ID -> parent ID), those whose parent ``scope`` has not claimed,
        for entries it has not claimed either (a claimed one is settled by the write: skipped,
        or a conflict): one primary-key read per parent, and per such entry. A writer that
        loaded the session before it was deleted and created again finds its parent missing
        in the new incarnation (docs/design.md#store-contract)."""
        if not parents:
            return {}
        found = await self.claims(scope.key(p) for p in parents.values())
        missing = {e: p for e, p in parents.items() if scope.key(p) not in found}
        if not missing:
            return {}
        claimed = await self.claims(scope.key(e) for e in missing)
        return {e: p for e, p in missing.items() if scope.key(e) not in claimed}

    async def move(self, moves: Sequence[tuple[dict[str, Any], int | None]]) -> set[str]:
        """Make each stored claim say what its new ``claim`` says, if it still points at
        ``held`` (a writer taking over entries whose document was fenced, or moving its own into
        another document); the keys of those moved. Two requests however many they are (a
        round trip each held the writer's slot open ``abandon_after`` and more for a large
        batch, and readers fenced it): the claims still pointing at their ``held`` are deleted,
        then the new ones inserted. A claim another writer moved first, or inserted in between,
        stays that writer's."""
        if not moves:
            return set()
        by_held: dict[int | None, list[str]] = {}
        for claim, held in moves:
            by_held.setdefault(held, []).append(claim["_id"])
        for held, group in by_held.items():
            await self._collection.delete_many({"_id": {"$in": group}, "q": held})
        docs = [claim for claim, _ in moves]
        keys = {claim["_id"] for claim in docs}
        try:
            await self._collection.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            if not only_duplicate_keys(exc):
                raise
            return keys - {docs[int(err["index"])]["_id"] for err in exc.details["writeErrors"]}
        return keys

    async def release(self, held: dict[str, int]) -> None:
        """Delete the claims this call holds (key: the seq it points them at) for entries it
        will not store (a conflict); one another writer took over stays."""
        await asyncio.gather(
            *(self._collection.delete_one({"_id": key, "q": seq}) for key, seq in held.items())
        )

    async def walk(self, scope: Scope, seq: int) -> int:
        """The first slot boundary at or after the slot ``seq`` that is free right now: follow
        taken slots to their ends. A long walk moves the session's ``next_seq`` hint forward."""
        steps = 0
        while True:
            slot = await self._collection.find_one({"_id": scope.at(seq)}, {"n": 1})
            if slot is None:
                break
            n = slot.get("n")
            seq += n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
            steps += 1
        if steps > _HINT_AFTER_STEPS:
            await self._sessions.update_one(
                {"_id": scope.sid, "inc": scope.inc}, {"$max": {"next_seq": seq}}
            )
        return seq

    async def slot(self, scope: Scope, seq: int) -> Slot | None:
        """The slot that starts at ``seq``; ``None`` if none does (or it is damaged)."""
        doc = await self._collection.find_one({"_id": scope.at(seq)}, {"n": 1, "t": 1})
        n = None if doc is None else doc.get("n")
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            return None
        taken = doc.get("t") if doc is not None else None
        return Slot(seq, n, taken if isinstance(taken, datetime) else None)

    async def take_slot(self, scope: Scope, seq: int, count: int) -> int:
        """Claim a slot of ``count`` numbers at the first free boundary from ``seq`` on."""
        while True:
            seq = await self.walk(scope, seq)
            if await self.insert([slot_doc(scope, seq, count)]):
                return seq

    async def incarnations(self, sid: str) -> set[str]:
        """The incarnations the claims and slots of session ``sid`` belong to."""
        found = await self._collection.distinct("i", {"_id": id_range(sid)})
        return {inc for inc in found if isinstance(inc, str)}

    async def purge(self, scope: Scope) -> None:
        """Every claim and slot of one incarnation (a deleted session)."""
        await self._collection.delete_many({"_id": id_range(scope.sid), "i": scope.inc})
