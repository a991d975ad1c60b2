"""How MongoStore writes one batch in the batch layout: one document per ``append_entries`` call.

A batch document ``{_id, session_id, entry_id, seq, keys, wires}`` holds the entries of one call
in order: ``wires`` are their exact ``encode_entry`` strings, ``keys`` their
``"<session_id>/<entry_id>"`` keys, ``entry_id`` the first entry's ID (``_id`` is its key) and
``seq`` the first entry's number (the batch's entries take ``seq .. seq + len - 1``, so documents
of both layouts sort together). FerretDB is slow per document (its SQLite backend parses every
stored document of the collection on a load), so a session written in 10-entry appends loads a
tenth of the documents of the per-entry layout.

**A new batch is two writes** (:mod:`~durable_agent.stores.mongo_claims` has the claims and slots):
one ordered ``insert_many`` of the slot at the end this store object knows and the batch's claims
(sent together with a primary-key read of the session document, which must still exist, when this
object last saw it over ``VERIFY_INTERVAL`` ago), then one ``insert_one`` of the batch document: a
single document is written all or nothing. A writer that does not know the session's end yet reads
the session document first (its ``next_seq`` hint, and whether its entries have claims: a session
written before claims existed gets them now, from what is stored).

**The careful path**, when an ID of the batch is claimed already: the claims and the documents
they point at are looked up by ``_id``; stored identical entries are skipped, a stored ID with
other content raises ``EntryConflictError`` (and this call's claims are deleted: nothing of the
batch stays), and an ID claimed but not stored (its writer crashed between the claim and the
insert, or is still in flight) is written by this call, which points the claim at its own
document and content: as in the per-entry layout, only a stored entry wins, so a retry whose
entry differs from what a crashed attempt claimed is stored. The rest is claimed and inserted
in a fresh slot. Two writers of the same batch insert documents with the same ``_id``: one copy
is stored. Two overlapping batches in flight together may both store a shared entry: on MongoDB
the unique multikey index on ``keys`` rejects the second; on FerretDB (which does not enforce it
per element) the load returns an identical copy once and raises ``CorruptSessionError`` for a
differing one (:mod:`~durable_agent.stores.mongo_read`), never a wrong entry silently.

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

from ..session.appendplan import plan_append
from ..session.entries import Entry
from ..session.errors import (
    CorruptSessionError,
    EntryConflictError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from .mongo_append import SeqFloors, entry_key, first_error_index, only_duplicate_keys
from .mongo_claims import Claim, Claims, claim_doc, slot_key

__all__ = [
    "CLAIMED",
    "MAX_BATCH_DOCUMENT_BYTES",
    "VERIFY_INTERVAL",
    "BatchDocumentWriter",
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

#: Sessions a store object remembers as having claims for all their entries (LRU).
_READY_CACHE_SIZE = 4096

#: Seconds during which a fast-path append trusts that a session this object saw (created,
#: loaded, checked) still exists; after that the next append reads the session document
#: alongside its claims (module doc: an append racing a delete by another process).
VERIFY_INTERVAL = 1.0

#: The value of the session document's ``claims`` field once all its entries are claimed.
CLAIMED = 1

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


def _stored_from(sid: str, doc: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(entry_id, wire, seq)`` of every entry a stored document of either layout holds."""
    seq = doc.get("seq")
    if "wires" not in doc:
        return [(doc.get("entry_id", ""), doc.get("wire", ""), seq)]
    keys, wires = doc.get("keys"), doc.get("wires")
    prefix = f"{sid}/"
    if (
        not isinstance(keys, list)
        or not isinstance(wires, list)
        or len(keys) != len(wires)
        or not all(isinstance(k, str) and k.startswith(prefix) for k in keys)
    ):
        raise CorruptSessionError(sid, f"bad batch document {doc.get('_id')!r}: keys/wires")
    base = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    return [
        (key[len(prefix) :], wire, None if base is None else base + i)
        for i, (key, wire) in enumerate(zip(keys, wires, strict=True))
    ]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Ready(OrderedDict[str, float]):
    """Sessions this store object knows to have claims for every stored entry, with when it
    last saw the session document (``time.monotonic()``; LRU-bounded)."""

    def add(self, sid: str) -> None:
        self[sid] = time.monotonic()
        self.move_to_end(sid)
        while len(self) > _READY_CACHE_SIZE:
            self.popitem(last=False)

    def stale(self, sid: str) -> bool:
        """Whether the session document was last seen over ``VERIFY_INTERVAL`` ago."""
        return time.monotonic() - self[sid] > VERIFY_INTERVAL


class BatchDocumentWriter:
    """Writes encoded, de-duplicated batches as batch documents (module doc)."""

    def __init__(self, sessions: Any, entries: Any, floors: SeqFloors, claims: Claims) -> None:
        self._sessions = sessions
        self._entries = entries
        self._floors = floors
        self._claims = claims
        self._ready = _Ready()

    def seen(self, sid: str, session: dict[str, Any], end: int) -> None:
        """A load read the session document and its entries up to ``end``: a session with
        claims needs no preparation before the next append, which starts at the later of
        ``end`` and the ``next_seq`` hint (both slot boundaries)."""
        hint = session.get("next_seq", 0)
        if session.get("claims") == CLAIMED and _int(hint):
            self._floors.raise_to(sid, max(end, hint))
            self._ready.add(sid)

    def created(self, sid: str) -> None:
        """This object created the session with claims (``claims: 1``, ``next_seq`` 0)."""
        self._floors.raise_to(sid, 0)
        self._ready.add(sid)

    def forget(self, sid: str) -> None:
        self._ready.pop(sid, None)

    async def write(self, sid: str, todo: _Batch) -> None:
        """The fast path: claim the slot and the IDs in one insert (checking the session
        exists alongside), then insert the document; a claimed ID takes :meth:`_careful`."""
        check = None
        if sid in self._ready and sid in self._floors:
            first = self._floors[sid]
            if self._ready.stale(sid):
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
                self._ready.add(sid)
            if done:
                break
            first = await self._claims.walk(sid, first)  # the slot is taken: another writer
        self._floors.raise_to(sid, first + count)
        mine = {c["_id"]: c["b"] for c in claims[1:done]}
        ours: list[str] = []  # documents of a split batch stored before a duplicate key
        race: Exception | None = None
        if done == len(claims):
            try:
                await self._insert(docs)
            except DuplicateKeyError as exc:
                race = exc  # a writer without claims (module doc of mongo): look it up
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
        """Read the session document (it must exist); give its entries claims if it has none
        yet; the first slot boundary to try, never below this object's floor."""
        session = await self._sessions.find_one({"_id": sid}, {"next_seq": 1, "claims": 1})
        if session is None:
            raise SessionNotFoundError(sid)
        hint = session.get("next_seq", 0)
        if not _int(hint):
            raise CorruptSessionError(sid, f"bad session document: next_seq is {hint!r}")
        if session.get("claims") != CLAIMED:
            hint = await self._backfill(sid, hint)
        first = max(int(hint), self._floors.get(sid, 0))
        self._floors.raise_to(sid, first)
        self._ready.add(sid)
        return first

    async def _backfill(self, sid: str, hint: int) -> int:
        """Claims for every stored entry of a session written without them (per-entry documents,
        or batch documents of an older version); its slots start past what is stored."""
        end = hint
        claims = []
        projection = {"entry_id": 1, "seq": 1, "wire": 1, "keys": 1, "wires": 1}
        async for doc in self._entries.find({"session_id": sid}, projection):
            for eid, wire, seq in _stored_from(sid, doc):
                if isinstance(wire, str):
                    claims.append(claim_doc(sid, eid, wire, doc["_id"]))
                if _int(seq):
                    end = max(end, seq + 1)
        await self._claims.backfill(claims)
        await self._sessions.update_one(
            {"_id": sid}, {"$set": {"claims": CLAIMED}, "$max": {"next_seq": end}}
        )
        return end

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
            self._floors.raise_to(sid, above)
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
    ) -> dict[str, tuple[Any, Any]]:
        """``{entry_id: (wire, seq)}`` of the IDs of ``todo`` that are stored: in the document
        their claim points at, or in a document whose ``_id`` is their own key (a per-entry
        document, or a batch they are first in); ``exhaustive`` (after a document insert hit a
        duplicate key) also by ``entry_id``, which finds one another program stored under an
        ``_id`` of its own (a collection scan on FerretDB)."""
        wanted = {entry.id for entry, _ in todo}
        places: set[str] = set()
        for entry, _ in todo:
            key = entry_key(sid, entry.id)
            places.add(key)
            held = mine.get(key) or getattr(claims.get(key), "batch_id", None)
            if held:
                places.add(held)
        projection = {"entry_id": 1, "seq": 1, "wire": 1, "keys": 1, "wires": 1}
        if len(places) <= 32:
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
        out: dict[str, tuple[Any, Any]] = {}
        for doc in docs:
            for eid, wire, seq in _stored_from(sid, doc):
                if eid in wanted and eid not in out:
                    out[eid] = (wire, seq)
        return out

    async def _insert(self, docs: list[dict[str, Any]]) -> None:
        if len(docs) == 1:
            await self._entries.insert_one(docs[0])
        else:
            await self._entries.insert_many(docs, ordered=True)

    async def _roll_back(self, sid: str, docs: list[str], claims: list[str]) -> None:
        """Delete what this call wrote before it found a conflict (SPEC §2.1): its documents,
        then its claims (its slot stays, a gap in ``seq``)."""
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


def _lookup(stored: dict[str, tuple[Any, Any]]) -> Callable[[str], str | None]:
    """``plan_append``'s view of what is stored: the wire of an ID, or ``None``; a stored
    value that is not a string compares unequal to every wire (a conflict, never a skip). A
    claim without its entry counts as not stored: nothing of that append was stored."""

    def wire_of(eid: str) -> str | None:
        found = stored.get(eid)
        if found is None:
            return None
        return found[0] if isinstance(found[0], str) else ""

    return wire_of
