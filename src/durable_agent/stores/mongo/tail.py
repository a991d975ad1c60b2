"""How MongoStore reads the entries after a sequence number: ``load_entries_after``, what a
follower polls (docs/design.md#mongo-store, docs/design.md#receipts).

**Positions.** An entry's seq is its 1-based position in append order, counted over the batch
documents in ``seq`` order (``seq`` has gaps, a slot whose append failed, so it orders but does
not count). A read first reads every document's ``seq`` and ``keys`` (the outline: a few bytes
per entry, nothing decoded), counts positions from those, then fetches whole only the documents
holding positions after the asked-for one (:func:`parts`).

**Open gaps.** An append takes its slot before its document goes in, and the appends of two
writers race, so a later slot's document can be stored before an earlier slot's. A position
counted past a place whose document may still land would move when it does: a follower that read
it would miss an entry or see one twice. So a read hands out positions only up to the first
place of the slot chain that is neither filled nor settled. The chain starts at 0 and has no
holes (:mod:`~durable_agent.stores.mongo.claims`): walking the outline in ``seq`` order, each
document starts where the one before it ended, unless there is a **gap**. The slot at the gap
(a primary-key read in the claims collection) says what it is:

- a fence at the place: **settled**. A slot's documents go in with one ordered insert, which
  stops at the fence, so nothing after it in that slot can land; the walk goes on at the slot's
  end.
- no fence, and the slot was taken less than ``abandon_after`` seconds ago: **open**, its append
  may be in flight. The read stops there; the follower's next poll finds it filled or settled.
- no fence, and the slot is older: its writer died or stalls. The reader fences the place itself,
  so the document can never land (a writer that finds a fence at its place moves its batch to a
  later slot, :mod:`~durable_agent.stores.mongo.writer`), and the gap is settled. If the place is
  taken by then (the document just landed), the read stops there and the next one reads it.
- no slot starts there (documents of another shape, left by hand): settled up to the next
  document.

A document of a split batch names its slot, so a gap inside a slot is looked up by the slot's
start. A settled gap stays settled (slots and fences go only with their incarnation), so a store
object remembers it and looks each one up once, not on every poll. ``load_entries`` returns
every stored document; only the positions after an open gap may still move, and this read never
hands them out.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pymongo import ASCENDING

from ...session.entries import Entry
from ...session.errors import StoreUnavailableError
from .batches import fence_places
from .claims import POINT_LIMIT, Claims, Slot
from .decode import (
    LOAD_BATCH_SIZE,
    LOAD_PROJECTION,
    OUTLINE_PROJECTION,
    decode_documents,
    seq_of,
    slot_of,
    strings,
)
from .incarnation import Scope

__all__ = ["ABANDON_AFTER", "Part", "TailReader", "parts"]

#: Seconds a reader (or an append that needs its entries) waits for the document of a slot
#: before it fences that place.
ABANDON_AFTER = 10.0

#: Settled gaps a store object remembers (LRU).
_SETTLED_SIZE = 65536


class Part(NamedTuple):
    """A document holding entries after the asked-for seq: its ``_id`` and ``seq``, how many
    of its entries come before the asked-for seq, and how many it holds."""

    doc_id: Any
    seq: int
    skip: int
    size: int


def parts(
    sid: str, docs: list[dict[str, Any]], after: int, limit: int | None = None
) -> list[Part] | None:
    """The documents of ``docs`` (``_id``, ``seq``, ``keys``; sorted by ``seq``) that hold the
    positions after ``after``, in order, up to the one holding position ``after + limit``;
    ``None`` when an entry key repeats (FerretDB does not enforce the unique index on keys),
    whose positions only a whole decode settles (a repeat past the last part moves no position
    before it)."""
    seen: set[str] = set()
    position = 0
    found: list[Part] = []
    for doc in docs:
        if limit is not None and position >= after + limit:
            break
        seq = seq_of(sid, doc)
        keys = strings(sid, doc, "keys")
        if seen.intersection(keys) or len(set(keys)) != len(keys):
            return None
        seen.update(keys)
        if position + len(keys) > after:
            found.append(Part(doc["_id"], seq, max(0, after - position), len(keys)))
        position += len(keys)
    return found


def _size(doc: dict[str, Any]) -> int:
    keys = doc.get("keys")
    return len(keys) if isinstance(keys, list) else 1


class TailReader:
    """Reads a session's entries after a seq, up to its first open gap (module doc)."""

    def __init__(self, entries: Any, claims: Claims, abandon_after: float) -> None:
        self._entries = entries
        self._claims = claims
        self._abandon_after = abandon_after
        self._settled: OrderedDict[str, int] = OrderedDict()  # gap place -> where the walk goes on

    async def read(
        self, scope: Scope, outline: list[dict[str, Any]], after: int | None, limit: int | None
    ) -> list[tuple[int, Entry]] | None:
        """The entries after ``after`` with their seqs, at most ``limit``, from ``outline``
        (documents and fences of the incarnation, sorted by ``seq``), fetching only the
        documents holding them; ``None`` if a document changed meanwhile. ``after`` ``None``:
        the last ``limit`` entries (one by default) before the first open gap."""
        docs = await self.settled(scope, outline)
        last = after is None
        if after is None:
            limit = limit or 1
            after = max(0, sum(_size(doc) for doc in docs) - limit)
        wanted = parts(scope.sid, docs, after, limit)
        if wanted is None:  # an ID stored twice: positions from a whole decode
            whole = [Part(doc["_id"], seq_of(scope.sid, doc), 0, _size(doc)) for doc in docs]
            fetched = await self._fetch(scope, whole)
            if fetched is None:
                return None
            found = list(enumerate(decode_documents(scope.sid, fetched), 1))
            return found[-(limit or 1) :] if last else found[after:][:limit]
        fetched = await self._fetch(scope, wanted)
        if fetched is None:
            return None
        skip = wanted[0].skip if wanted else 0
        return list(enumerate(decode_documents(scope.sid, fetched, skip, limit), after + 1))

    async def settled(
        self, scope: Scope, outline: list[dict[str, Any]], fence_below: int = 0, start: int = 0
    ) -> list[dict[str, Any]]:
        """The batch documents of ``outline`` before its first open gap (module doc); a gap
        below ``fence_below`` is fenced whatever its age (a guarded append's, below). ``start``:
        the place the outline starts at (a document is there)."""
        kept: list[dict[str, Any]] = []
        expected = start  # where the chain goes on
        named: tuple[int, int] | None = None  # the slot the last kept document names
        i = 0
        while i < len(outline):
            doc = outline[i]
            seq = seq_of(scope.sid, doc)
            fence = bool(doc.get("fence"))
            if seq < expected or (seq == expected and not fence):
                if not fence:
                    kept.append(doc)
                    expected = max(expected, seq + _size(doc))
                    named = slot_of(doc)
                i += 1
                continue
            later = (seq_of(scope.sid, d) for d in outline[i:])
            upto = next((s for s in later if s > expected), expected + 1)
            resume = await self._settle(
                scope, expected, named, fenced=fence, upto=upto, now=expected < fence_below
            )
            if resume is None:
                break
            expected = resume
        return kept

    async def _settle(
        self,
        scope: Scope,
        place: int,
        named: tuple[int, int] | None,
        *,
        fenced: bool,
        upto: int,
        now: bool,
    ) -> int | None:
        """Where the walk goes on past the gap at ``place`` (``fenced``: a fence is there), or
        ``None`` if the gap is open (module doc)."""
        key = scope.at(place)
        if key in self._settled:
            self._settled.move_to_end(key)
            return self._settled[key]
        slot: Slot | None
        if named is not None and named[0] <= place < named[0] + named[1]:
            slot = await self._claims.slot(scope, named[0]) or Slot(*named, None)
        else:
            slot = await self._claims.slot(scope, place)
        if slot is None:
            resume = upto
        else:
            if not fenced and not await self._fence(scope, place, None if now else slot):
                return None
            resume = slot.seq + slot.n
        resume = max(resume, place + 1)
        self._settled[key] = resume
        while len(self._settled) > _SETTLED_SIZE:
            self._settled.popitem(last=False)
        return resume

    async def _fence(self, scope: Scope, place: int, slot: Slot | None) -> bool:
        """Fence ``place`` if its slot is older than ``abandon_after`` (``None``: at once);
        ``False`` if it is not, or the place is taken (its document landed meanwhile)."""
        if slot is not None and slot.taken is not None:
            age = (datetime.now(UTC) - slot.taken).total_seconds()
            if age < self._abandon_after:
                return False
        return await fence_places(self._entries, scope, [place])

    async def keys_before(
        self, scope: Scope, end: int | None, fence_below: int, patience: float, since: str = ""
    ) -> list[str]:
        """The entry keys of the documents before place ``end``, in append order, once every
        place before it is settled: what a guarded append about to land at ``end`` compares
        (docs/design.md#mongo-store). A gap below ``fence_below`` (a slot taken before the
        appender's first) is fenced at once, a later one waited for as a reader waits. ``end``
        ``None``: the keys of every stored document, nothing waited for (an append that stores
        nothing lands nowhere). ``since``: the key the append expects newest; only the places
        from its document on count then (a gap before it cannot hold a later entry), read by
        ``_id`` alone when its document ends at ``end``, as a chained append's does."""
        start = 0 if end is None or not since else await self._place_of(scope, since, end)
        if isinstance(start, list):
            return start
        query: dict[str, Any] = {"session_id": scope.sid, "inc": scope.inc}
        if end is not None:
            query["seq"] = {"$gte": start, "$lt": end} if start else {"$lt": end}
        deadline, waits = time.monotonic() + patience, 0
        while True:
            cursor = self._entries.find(query, OUTLINE_PROJECTION, batch_size=LOAD_BATCH_SIZE)
            docs = await cursor.sort("seq", ASCENDING).to_list(None)
            if end is not None:
                mark: dict[str, Any] = {"seq": end, "keys": []}  # kept: no gap before it is open
                docs = await self.settled(scope, [*docs, mark], fence_below, start)
            if end is None or (docs and docs[-1] is mark):
                batches = [doc for doc in docs if not doc.get("fence")]
                return [key for doc in batches for key in strings(scope.sid, doc, "keys")]
            if time.monotonic() > deadline:
                raise StoreUnavailableError(
                    f"session {scope.sid!r}: a guarded append waited {patience:g} s for "
                    "the appends before it (retry it)"
                )
            await asyncio.sleep(min(0.001 * 2 ** min(waits, 7), 0.1))
            waits += 1

    async def _place_of(self, scope: Scope, key: str, end: int) -> int | list[str]:
        """Where the stored document holding ``key`` is (``0``: not known, walk it all); its
        keys if it ends at ``end``, nothing between."""
        claim = (await self._claims.claims([key])).get(key)
        if claim is None or claim.seq is None:
            return 0
        doc = await self._entries.find_one({"_id": scope.at(claim.seq)}, OUTLINE_PROJECTION)
        if doc is None or doc.get("fence") or key not in strings(scope.sid, doc, "keys"):
            return 0
        return strings(scope.sid, doc, "keys") if claim.seq + _size(doc) == end else claim.seq

    async def _fetch(self, scope: Scope, wanted: list[Part]) -> list[dict[str, Any]] | None:
        """The documents of ``wanted``, whole and in order; ``None`` if one is gone or changed."""
        if not wanted:
            return []
        projection = {**LOAD_PROJECTION, "_id": 1}
        if len(wanted) <= POINT_LIMIT:  # primary-key reads, the only kind FerretDB does not scan
            found = await asyncio.gather(
                *(self._entries.find_one({"_id": p.doc_id}, projection) for p in wanted)
            )
        else:
            seqs = {"$gte": wanted[0].seq, "$lte": wanted[-1].seq}
            query = {"session_id": scope.sid, "inc": scope.inc, "seq": seqs}
            cursor = self._entries.find(query, projection, batch_size=LOAD_BATCH_SIZE)
            by_id = {doc["_id"]: doc async for doc in cursor}
            found = [by_id.get(p.doc_id) for p in wanted]
        docs = [doc for doc in found if doc is not None]
        shapes = [(doc["_id"], len(doc.get("wires") or ())) for doc in docs]
        return docs if shapes == [(p.doc_id, p.size) for p in wanted] else None
