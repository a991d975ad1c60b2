"""How MongoStore writes one batch in the batch layout: one document per ``append_entries`` call.

The layout (opt-in, ``MongoStore(layout="batch")``; :mod:`durable_agent.stores.mongo` says why
it is not the default): a batch document
``{_id, session_id, entry_id, seq, keys, wires}`` holds the entries of one call in order:
``wires`` are their exact ``encode_entry`` strings, ``keys`` their ``"<session_id>/<entry_id>"``
keys, ``entry_id`` the first entry's ID (``_id`` is its key) and ``seq`` the first entry's number
(the batch's entries take ``seq .. seq + len - 1``, numbers from the same counter the
one-document-per-entry layout uses, so both layouts sort together). FerretDB is slow per
document (its SQLite backend parses every stored document on a load), so a session written in
10-entry appends loads a tenth of the documents.

**A new batch is two writes:** one ``findAndModify`` on the session's claims document claims
its IDs and reserves its ``seq`` numbers (:mod:`~durable_agent.stores.mongo_claims`), then one
``insert_one``: a single document is written all or nothing, so a failed append leaves nothing
of its batch. A claim that fails (an ID is claimed already) sends the append down the careful
path: the batch's IDs are looked up, identical stored entries are skipped, a stored ID with
other content raises ``EntryConflictError`` before anything is written, and the rest is claimed
and inserted. The claims exist because FerretDB 1.24 does not enforce a unique index on an
array field per element (it indexes the whole array as one value) and pushes only ``_id``
equality down to SQL: a lookup by ``keys`` scans the whole collection there, which cost 10x in
throughput with 20 concurrent sessions when every append did it. On MongoDB the sparse unique
multikey index on ``keys`` also referees concurrent writers.

**Duplicate keys** (two writers raced): the unique indexes on ``_id``, ``(session_id,
entry_id)``, ``(session_id, seq)`` and (MongoDB) ``keys`` reject the second document; the
careful path then looks the IDs up again and writes only what is still missing, above what it
found (so the batch reads in order). On FerretDB, whose updates are not atomic, two *different*
batches sharing an entry ID, in flight at the same moment, can both store it; the load then drops
an identical later copy and raises ``CorruptSessionError`` for a differing one, so a wrong entry
is never returned silently. Sequential appends and retries of one batch are exact everywhere.

**Large batches:** a batch whose documents would pass MongoDB's 16 MiB limit is split into
several documents, inserted with one ordered ``insert_many``: a failure can then leave a prefix
of those documents (a retry completes it), and a conflict found after one of them went in (a
race) deletes what this call inserted before raising, as in the per-entry layout.
"""

from __future__ import annotations

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
from .mongo_append import (
    SeqFloors,
    entry_key,
    first_error_index,
    only_duplicate_keys,
)
from .mongo_claims import Claims

__all__ = [
    "MAX_BATCH_DOCUMENT_BYTES",
    "BatchDocumentWriter",
    "split_documents",
    "stored_entries",
    "stored_ids",
]

#: Estimated BSON bytes a batch document may reach: 64 KiB below MongoDB's 16 MiB limit. One
#: entry at the largest accepted size (15 MiB) always fits on its own.
MAX_BATCH_DOCUMENT_BYTES = 16 * 1024 * 1024 - 64 * 1024

#: Per-element BSON overhead (type byte, array index key, length, terminator), rounded up.
_ELEMENT_OVERHEAD = 16
_DOCUMENT_OVERHEAD = 256

#: Rounds of "look up, reserve, insert, hit a duplicate key" before an append gives up.
_MAX_WRITE_ROUNDS = 50

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


async def stored_entries(collection: Any, sid: str, todo: _Batch) -> dict[str, tuple[Any, Any]]:
    """``{entry_id: (wire, seq)}`` of the IDs of ``todo`` stored in either layout.

    Batch documents are found by ``keys``, per-entry documents (and a batch's first entry) by
    ``entry_id``; on MongoDB both are index lookups, FerretDB scans the collection.
    """
    ids = list(dict.fromkeys(entry.id for entry, _ in todo))
    keys = [entry_key(sid, eid) for eid in ids]
    query = {"session_id": sid, "$or": [{"keys": {"$in": keys}}, {"entry_id": {"$in": ids}}]}
    projection = {"_id": 1, "entry_id": 1, "seq": 1, "wire": 1, "keys": 1, "wires": 1}
    wanted = set(ids)
    out: dict[str, tuple[Any, Any]] = {}
    async for doc in collection.find(query, projection):
        for eid, wire, seq in _stored_from(sid, doc):
            if eid in wanted and eid not in out:
                out[eid] = (wire, seq)
    return out


async def stored_ids(collection: Any, sid: str) -> tuple[int, list[str]]:
    """One past the highest ``seq`` used and every entry ID stored in the session, in either
    layout (what a claims document is built from)."""
    ids: list[str] = []
    end = 0
    projection = {"_id": 0, "entry_id": 1, "keys": 1, "seq": 1}
    async for doc in collection.find({"session_id": sid}, projection):
        keys = doc.get("keys")
        if isinstance(keys, list):
            ids.extend(k[len(sid) + 1 :] for k in keys if isinstance(k, str))
        elif isinstance(doc.get("entry_id"), str):
            ids.append(doc["entry_id"])
        seq = doc.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            end = max(end, seq + (len(keys) if isinstance(keys, list) else 1))
    return end, ids


class BatchDocumentWriter:
    """Writes encoded, de-duplicated batches as batch documents (module doc)."""

    def __init__(self, sessions: Any, entries: Any, floors: SeqFloors, claims: Claims) -> None:
        self._sessions = sessions
        self._entries = entries
        self._floors = floors
        self._claims = claims

    async def write(self, sid: str, todo: _Batch) -> None:
        """The fast path: reserve and claim together (:mod:`~durable_agent.stores.mongo_claims`)
        and, if no ID was claimed before, insert the one document; anything else (a claimed ID,
        a duplicate key, a batch over one document) takes :meth:`_careful`."""
        runs = split_documents(sid, todo)
        if len(runs) == 1:
            first = await self._claims.reserve_new(sid, (e.id for e, _ in todo), len(todo))
            if first is not None:
                try:
                    await self._entries.insert_one(_documents(sid, runs, first)[0])
                except DuplicateKeyError:
                    pass  # a racing writer: look up what it stored
                else:
                    return
        await self._careful(sid, todo)

    async def _careful(self, sid: str, todo: _Batch) -> None:
        """Look up and reserve together, skip what is stored, claim and insert the rest in one
        document (or several, over the size limit); a duplicate key starts another round."""
        ours: list[str] = []  # _ids of documents this call inserted (only with several)
        race: Exception | None = None
        for _ in range(_MAX_WRITE_ROUNDS):
            stored = await stored_entries(self._entries, sid, todo)
            try:
                todo = plan_append(sid, todo, _lookup(stored))
            except EntryConflictError:
                await self._roll_back(sid, ours)
                raise
            if not todo:
                return
            first = await self._claims.reserve(
                sid, (e.id for e, _ in todo), len(todo), lambda: self._initial(sid)
            )
            seqs = [seq for _, seq in stored.values() if isinstance(seq, int)]
            if seqs and max(seqs) >= first:
                first = max(seqs) + 1  # above what is stored, so the batch reads in order
                self._floors.raise_to(sid, first + len(todo))
            runs = split_documents(sid, todo)
            docs = _documents(sid, runs, first)
            try:
                await self._insert(docs)
            except DuplicateKeyError as exc:
                race = exc
                continue
            except BulkWriteError as exc:
                if not only_duplicate_keys(exc):
                    raise
                race = exc
                done = first_error_index(exc)
                ours.extend(doc["_id"] for doc in docs[:done])
                todo = [item for run in runs[done:] for item in run]
                continue
            return
        raise StoreUnavailableError(
            f"session {sid!r}: append kept colliding with concurrent writers "
            f"({_MAX_WRITE_ROUNDS} rounds)"
        ) from race

    async def _initial(self, sid: str) -> tuple[int, list[str]]:
        """What a missing claims document starts from: the session's counter (or the end of
        its stored entries, if higher) and its stored IDs; the session must exist."""
        session = await self._sessions.find_one({"_id": sid}, {"next_seq": 1})
        if session is None:
            raise SessionNotFoundError(sid)
        counter = session.get("next_seq", 0)
        if not isinstance(counter, int) or isinstance(counter, bool):
            raise CorruptSessionError(sid, f"bad session document: next_seq is {counter!r}")
        end, ids = await stored_ids(self._entries, sid)
        return max(counter, end), ids

    async def _insert(self, docs: list[dict[str, Any]]) -> None:
        if len(docs) == 1:
            await self._entries.insert_one(docs[0])
        else:
            await self._entries.insert_many(docs, ordered=True)

    async def _roll_back(self, sid: str, keys: list[str]) -> None:
        """Delete the documents this call inserted before it found a conflict (SPEC §2.1)."""
        if keys:
            await self._entries.delete_many({"_id": {"$in": keys}, "session_id": sid})


def _lookup(stored: dict[str, tuple[Any, Any]]) -> Callable[[str], str | None]:
    """``plan_append``'s view of what is stored: the wire of an ID, or ``None``; a stored
    value that is not a string compares unequal to every wire (a conflict, never a skip)."""

    def wire_of(eid: str) -> str | None:
        found = stored.get(eid)
        if found is None:
            return None
        return found[0] if isinstance(found[0], str) else ""

    return wire_of
