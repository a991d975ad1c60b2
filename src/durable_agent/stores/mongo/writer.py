"""How MongoStore writes one append: one batch document (docs/design.md#mongo-store).

A batch document ``{_id, session_id, entry_id, seq, keys, wires}`` holds the entries of one
``append_entries`` call in order: ``wires`` are their exact ``encode_entry`` strings, ``keys``
their ``"<session_id>/<entry_id>"`` keys, ``entry_id`` the first entry's ID (``_id`` is its key)
and ``seq`` the first entry's number (the batch's entries take ``seq .. seq + len - 1``).
FerretDB is slow per document (its SQLite backend parses every stored document of the
collection on a load), so one document per append, not per entry, keeps loads fast there.

**A new batch is two writes** (:mod:`~durable_agent.stores.mongo.claims` has the claims and
slots): one ordered ``insert_many`` of the slot at the end this store object knows and the
batch's claims (sent together with a primary-key read of the session document, which must still
exist, when this object last saw it over ``VERIFY_INTERVAL`` ago), then one ``insert_one`` of the
batch document: a single document is written all or nothing. A writer that does not know the
session's end yet reads the session document's ``next_seq`` hint first.

**The careful path**, when an ID of the batch is claimed already: the claims and the documents
they point at are looked up by ``_id``; stored identical entries are skipped, a stored ID with
other content raises ``EntryConflictError`` (and this call's claims are deleted: nothing of the
batch stays), and an ID claimed but not stored (its writer crashed between the claim and the
insert, or is still in flight) is written by this call, which points the claim at its own
document and content: only a stored entry wins, so a retry whose entry differs from what a
crashed attempt claimed is stored. The rest is claimed and inserted in a fresh slot. Two writers
of the same batch insert documents with the same ``_id``: one copy is stored; the loser's
duplicate key sends it back to look (also by ``entry_id``, which finds a document another program
stored under an ``_id`` of its own). Two overlapping batches in flight together may both store a
shared entry: on MongoDB the unique multikey index on ``keys`` rejects the second; on FerretDB
(which does not enforce it per element) the load returns an identical copy once and raises
``CorruptSessionError`` for a differing one (:mod:`~durable_agent.stores.mongo.decode`), never a
wrong entry silently.

**Large batches:** a batch whose documents would pass MongoDB's 16 MiB limit is split into
several documents in one slot, inserted with one ordered ``insert_many``: a failure can then
leave a prefix of them (a retry completes it), and a conflict found after one of them went in
deletes what this call inserted before raising.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pymongo.errors import BulkWriteError, DuplicateKeyError

from ...session.appendplan import plan_append
from ...session.entries import Entry
from ...session.errors import (
    CorruptSessionError,
    EntryConflictError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from .claims import (
    POINT_LIMIT,
    Claim,
    Claims,
    claim_doc,
    entry_key,
    first_error_index,
    only_duplicate_keys,
    slot_key,
)
from .decode import stored_entries

__all__ = [
    "MAX_BATCH_DOCUMENT_BYTES",
    "VERIFY_INTERVAL",
    "BatchWriter",
    "SessionEnds",
    "split_documents",
]

#: Estimated BSON bytes a batch document may reach: 64 KiB below MongoDB's 16 MiB limit. One
#: entry at the largest accepted size (15 MiB) always fits on its own.
MAX_BATCH_DOCUMENT_BYTES = 16 * 1024 * 1024 - 64 * 1024

#: Per-element BSON overhead (type byte, array index key, length, terminator), rounded up.
_ELEMENT_OVERHEAD = 16
_DOCUMENT_OVERHEAD = 256

#: Rounds of "look up, claim, insert, hit a duplicate key" before an append gives up.
_MAX_WRITE_ROUNDS = 50

#: Sessions whose end (and when it was last seen) a store object remembers (LRU).
_CACHE_SIZE = 4096

#: Seconds during which a fast-path append trusts that a session this object saw (created,
#: loaded, checked) still exists; after that the next append reads the session document
#: alongside its claims (module doc: an append racing a delete by another process).
VERIFY_INTERVAL = 1.0

_Batch = list[tuple[Entry, str]]


def _key_bytes(sid: str, entry: Entry) -> int:
    return len(sid.encode("utf-8")) + 1 + len(entry.id.encode("utf-8"))


def split_documents(sid: str, todo: _Batch, limit: int = MAX_BATCH_DOCUMENT_BYTES) -> list[_Batch]:
    """``todo`` cut, in order, into runs that each fit one document of at most ``limit``
    estimated bytes: every entry adds its wire and its key; the first one's key and ID are also
    the document's ``_id`` and ``entry_id``."""
    runs: list[_Batch] = []
    current: _Batch = []
    used = 0
    for entry, wire in todo:
        size = len(wire.encode("utf-8")) + _key_bytes(sid, entry) + 2 * _ELEMENT_OVERHEAD
        if current and used + size > limit:
            runs.append(current)
            current = []
        if not current:
            used = _DOCUMENT_OVERHEAD + 2 * _key_bytes(sid, entry)
        current.append((entry, wire))
        used += size
    if current:
        runs.append(current)
    return runs


def _documents(sid: str, runs: list[_Batch], first: int) -> list[dict[str, Any]]:
    docs = []
    seq = first
    for run in runs:
        head = run[0][0].id
        docs.append(
            {
                "_id": entry_key(sid, head),
                "session_id": sid,
                "entry_id": head,
                "seq": seq,
                "keys": [entry_key(sid, entry.id) for entry, _ in run],
                "wires": [wire for _, wire in run],
            }
        )
        seq += len(run)
    return docs


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class SessionEnds(OrderedDict[str, tuple[int, float]]):
    """Per session, the slot boundary where this store object puts its next append (one past
    the highest ``seq`` it wrote or loaded: a writer's appends keep their order) and when it
    last saw the session document (``time.monotonic()``); LRU-bounded."""

    def raise_to(self, sid: str, end: int, *, seen: bool = False) -> None:
        known, at = self.get(sid, (0, 0.0))
        self[sid] = (max(end, known), time.monotonic() if seen else at)
        self.move_to_end(sid)
        while len(self) > _CACHE_SIZE:
            self.popitem(last=False)

    def stale(self, sid: str) -> bool:
        """Whether the session document was last seen over ``VERIFY_INTERVAL`` ago."""
        return time.monotonic() - self[sid][1] > VERIFY_INTERVAL


class BatchWriter:
    """Writes encoded, de-duplicated batches as batch documents (module doc)."""

    def __init__(self, sessions: Any, entries: Any, claims: Claims) -> None:
        self._sessions = sessions
        self._entries = entries
        self._claims = claims
        self._ends = SessionEnds()

    def seen(self, sid: str, session: dict[str, Any], end: int) -> None:
        """A load read the session document and its entries up to ``end``: the next append
        needs no preparation and starts at the later of ``end`` and the ``next_seq`` hint
        (both slot boundaries)."""
        hint = session.get("next_seq", 0)
        if _int(hint):
            self._ends.raise_to(sid, max(end, hint), seen=True)

    def created(self, sid: str) -> None:
        """This object created the session (``next_seq`` 0)."""
        self._ends.raise_to(sid, 0, seen=True)

    def forget(self, sid: str) -> None:
        self._ends.pop(sid, None)

    async def write(self, sid: str, todo: _Batch) -> None:
        """The fast path: claim the slot and the IDs in one insert (checking the session
        exists alongside), then insert the document; a claimed ID takes :meth:`_careful`."""
        check = None
        if sid in self._ends:
            first = self._ends[sid][0]
            if self._ends.stale(sid):
                check = asyncio.ensure_future(self._exists(sid))
        else:
            first = await self._prepare(sid)
        runs = split_documents(sid, todo)
        count = len(todo)
        while True:
            docs = _documents(sid, runs, first)
            claims: list[dict[str, Any]] = [{"_id": slot_key(sid, first), "s": sid, "n": count}]
            claims += _claims_for(sid, runs, docs)
            if check is None:
                done = await self._claims.insert(claims)
            else:
                done, exists = await _together(self._claims.insert(claims), check)
                check = None
                if not exists:
                    self.forget(sid)
                    await self._claims.release([c["_id"] for c in claims[:done]])
                    raise SessionNotFoundError(sid)
                self._ends.raise_to(sid, first, seen=True)
            if done:
                break
            first = await self._claims.walk(sid, first)  # the slot is taken: another writer
        self._ends.raise_to(sid, first + count)
        mine = {c["_id"]: c["b"] for c in claims[1:done]}
        ours: list[str] = []  # documents of a split batch stored before a duplicate key
        race: Exception | None = None
        if done == len(claims):
            try:
                await self._insert(docs)
            except DuplicateKeyError as exc:
                race = exc  # another copy of this batch, or a foreign document: look it up
            except BulkWriteError as exc:
                if not only_duplicate_keys(exc):
                    raise
                race = exc
                ours = [doc["_id"] for doc in docs[: first_error_index(exc)]]
            else:
                return
        await self._careful(sid, todo, mine, first + count, ours, race)

    async def _exists(self, sid: str) -> bool:
        return await self._sessions.find_one({"_id": sid}, {"_id": 1}) is not None

    async def _prepare(self, sid: str) -> int:
        """Read the session document (it must exist): the first slot boundary to try, its
        ``next_seq`` hint, never below this object's floor."""
        session = await self._sessions.find_one({"_id": sid}, {"next_seq": 1})
        if session is None:
            raise SessionNotFoundError(sid)
        hint = session.get("next_seq", 0)
        if not _int(hint):
            raise CorruptSessionError(sid, f"bad session document: next_seq is {hint!r}")
        self._ends.raise_to(sid, int(hint), seen=True)
        return self._ends[sid][0]

    async def _careful(
        self,
        sid: str,
        todo: _Batch,
        mine: dict[str, str],
        above: int,
        ours: list[str],
        race: Exception | None,
    ) -> None:
        """Look up what the batch's claims say, skip what is stored, write the rest in a fresh
        slot (``mine``: claims this call holds, by key, with their batch document; ``ours``:
        documents it stored, deleted again on a conflict; ``race``: the duplicate key of its
        last document insert, if any)."""
        for _ in range(_MAX_WRITE_ROUNDS):
            keys = [entry_key(sid, entry.id) for entry, _ in todo]
            claims = await self._claims.claims(k for k in keys if k not in mine)
            stored = await self._stored(sid, todo, claims, mine, exhaustive=race is not None)
            try:
                todo = plan_append(sid, todo, _lookup(stored))
            except EntryConflictError:
                await self._roll_back(sid, ours, list(mine))
                raise
            if not todo:
                return
            first = await self._claims.take_slot(sid, above, len(todo))
            above = first + len(todo)
            self._ends.raise_to(sid, above)
            runs = split_documents(sid, todo)
            docs = _documents(sid, runs, first)
            wanted = _claims_for(sid, runs, docs)
            new = [c for c in wanted if c["_id"] not in mine and c["_id"] not in claims]
            done = await self._claims.insert(new)
            mine.update((c["_id"], c["b"]) for c in new[:done])
            if done < len(new):
                continue  # a racing writer claimed one of them: look again
            for c in wanted:  # taken over, or moved to another document of this call
                if c["_id"] in claims or mine.get(c["_id"]) != c["b"]:
                    await self._claims.point_at(c)
                    mine[c["_id"]] = c["b"]
            try:
                await self._insert(docs)
            except DuplicateKeyError as exc:
                race = exc
                continue
            except BulkWriteError as exc:
                if not only_duplicate_keys(exc):
                    raise
                race = exc
                ours.extend(doc["_id"] for doc in docs[: first_error_index(exc)])
                continue
            return
        raise StoreUnavailableError(
            f"session {sid!r}: append kept colliding with concurrent writers "
            f"({_MAX_WRITE_ROUNDS} rounds)"
        ) from race

    async def _stored(
        self,
        sid: str,
        todo: _Batch,
        claims: dict[str, Claim],
        mine: dict[str, str],
        *,
        exhaustive: bool = False,
    ) -> dict[str, Any]:
        """``{entry_id: wire}`` of the IDs of ``todo`` that are stored: in the document their
        claim points at, or in a document whose ``_id`` is their own key (a batch they are first
        in); ``exhaustive`` (after a document insert hit a duplicate key) also by ``entry_id``,
        which finds one another program stored under an ``_id`` of its own (a collection scan on
        FerretDB)."""
        wanted = {entry.id for entry, _ in todo}
        places: set[str] = set()
        for entry, _ in todo:
            key = entry_key(sid, entry.id)
            places.add(key)
            held = mine.get(key) or getattr(claims.get(key), "batch_id", None)
            if held:
                places.add(held)
        projection = {"keys": 1, "wires": 1}
        if len(places) <= POINT_LIMIT:
            found = await asyncio.gather(
                *(self._entries.find_one({"_id": p}, projection) for p in sorted(places))
            )
            docs = [doc for doc in found if doc is not None]
        else:
            query = {"_id": {"$in": sorted(places)}, "session_id": sid}
            docs = [doc async for doc in self._entries.find(query, projection)]
        if exhaustive:
            query = {"session_id": sid, "entry_id": {"$in": sorted(wanted)}}
            docs += [doc async for doc in self._entries.find(query, projection)]
        out: dict[str, Any] = {}
        for doc in docs:
            for eid, wire in stored_entries(sid, doc):
                if eid in wanted and eid not in out:
                    out[eid] = wire
        return out

    async def _insert(self, docs: list[dict[str, Any]]) -> None:
        if len(docs) == 1:
            await self._entries.insert_one(docs[0])
        else:
            await self._entries.insert_many(docs, ordered=True)

    async def _roll_back(self, sid: str, docs: list[str], claims: list[str]) -> None:
        """Delete what this call wrote before it found a conflict (nothing of a conflicting batch
        stays, docs/design.md#store-contract): its documents, then its claims (its slot stays, a
        gap in ``seq``)."""
        if docs:
            await self._entries.delete_many({"_id": {"$in": docs}, "session_id": sid})
        await self._claims.release(claims)


def _claims_for(sid: str, runs: list[_Batch], docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims of a batch's entries, each pointing at the document of its run."""
    return [
        claim_doc(sid, entry.id, wire, doc["_id"])
        for run, doc in zip(runs, docs, strict=True)
        for entry, wire in run
    ]


async def _together(insert: Any, check: asyncio.Future[bool]) -> tuple[int, bool]:
    """Await the claims insert and the session check sent alongside it; a missing session
    wins over the insert's error (the insert is then undone by the caller's release)."""
    results = await asyncio.gather(insert, check, return_exceptions=True)
    done, exists = results
    if isinstance(exists, BaseException):
        raise exists
    if isinstance(done, BaseException):
        if not exists:
            return 0, False
        raise done
    return int(done), bool(exists)


def _lookup(stored: dict[str, Any]) -> Callable[[str], str | None]:
    """``plan_append``'s view of what is stored: the wire of an ID, or ``None``; a stored
    value that is not a string compares unequal to every wire (a conflict, never a skip). A
    claim without its entry counts as not stored: nothing of that append was stored."""

    def wire_of(eid: str) -> str | None:
        found = stored.get(eid)
        if found is None:
            return None
        return found if isinstance(found, str) else ""

    return wire_of
