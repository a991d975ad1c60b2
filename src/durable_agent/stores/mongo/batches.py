"""How one append becomes batch documents and claims (docs/design.md#mongo-store).

A batch document ``{_id, session_id, inc, entry_id, seq, keys, wires}`` holds the entries of one
``append_entries`` call in order: ``wires`` are their exact ``encode_entry`` strings, ``keys``
their keys (``<session_id>/<incarnation>/<entry_id>``), ``entry_id`` the first entry's ID,
``seq`` the first entry's number (the batch's entries take ``seq .. seq + len - 1``), ``inc`` the
session's incarnation (:mod:`~durable_agent.stores.mongo.incarnation`) and ``_id`` its place,
``<session_id>/<incarnation>#<seq>``. A batch whose documents would pass MongoDB's 16 MiB limit
is split into several documents in one slot; each of them also holds ``slot: [seq, n]``, the
slot's start and size, so a reader that finds one of them knows where the slot ends.

A **fence** ``{_id, session_id, inc, seq, fence: true}`` takes the place of a document that
must never land (:func:`fence_doc`): its ``_id`` and ``seq`` are the document's, both unique.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from pymongo.errors import DuplicateKeyError

from ...session.entries import Entry
from .claims import Claim, claim_doc, find_ids
from .decode import stored_entries
from .incarnation import Scope

__all__ = [
    "MAX_BATCH_DOCUMENT_BYTES",
    "Batch",
    "Guard",
    "NotLast",
    "claims_for",
    "documents",
    "fence_doc",
    "fence_places",
    "split_documents",
    "stored_lookup",
    "stored_wires",
]

#: Estimated BSON bytes a batch document may reach: 64 KiB below MongoDB's 16 MiB limit. One
#: entry at the largest accepted size (15 MiB) always fits on its own.
MAX_BATCH_DOCUMENT_BYTES = 16 * 1024 * 1024 - 64 * 1024

#: Per-element BSON overhead (type byte, array index key, length, terminator), rounded up.
_ELEMENT_OVERHEAD = 16
_DOCUMENT_OVERHEAD = 256

Batch = list[tuple[Entry, str]]
"""Entries with their encodings, in order."""


def split_documents(prefix: str, todo: Batch, limit: int = MAX_BATCH_DOCUMENT_BYTES) -> list[Batch]:
    """``todo`` cut, in order, into runs that each fit one document of at most ``limit``
    estimated bytes: every entry adds its wire and its key (``prefix``, ``/``, its ID); the
    first one's ID is also the document's ``entry_id``."""
    runs: list[Batch] = []
    current: Batch = []
    used = 0
    for entry, wire in todo:
        key = len(prefix.encode("utf-8")) + 1 + len(entry.id.encode("utf-8"))
        size = len(wire.encode("utf-8")) + key + 2 * _ELEMENT_OVERHEAD
        if current and used + size > limit:
            runs.append(current)
            current = []
        if not current:
            used = _DOCUMENT_OVERHEAD + 2 * key
        current.append((entry, wire))
        used += size
    if current:
        runs.append(current)
    return runs


def documents(scope: Scope, runs: list[Batch], first: int) -> list[dict[str, Any]]:
    """The documents of one slot from ``first`` on, one per run (module doc)."""
    docs: list[dict[str, Any]] = []
    seq = first
    for run in runs:
        doc = {
            "_id": scope.at(seq),
            "session_id": scope.sid,
            "inc": scope.inc,
            "entry_id": run[0][0].id,
            "seq": seq,
            "keys": [scope.key(entry.id) for entry, _ in run],
            "wires": [wire for _, wire in run],
        }
        if len(runs) > 1:
            doc["slot"] = [first, sum(len(r) for r in runs)]
        docs.append(doc)
        seq += len(run)
    return docs


def fence_doc(scope: Scope, seq: int) -> dict[str, Any]:
    """The fence at place ``seq`` (module doc)."""
    return {
        "_id": scope.at(seq),
        "session_id": scope.sid,
        "inc": scope.inc,
        "seq": seq,
        "fence": True,
    }


async def fence_places(entries: Any, scope: Scope, seqs: list[int]) -> bool:
    """Put a fence at each place in ``seqs`` (where a batch document was meant to go);
    ``False`` if one of them is taken (by a document or a fence)."""
    fenced = True
    for seq in seqs:
        try:
            await entries.insert_one(fence_doc(scope, seq))
        except DuplicateKeyError:
            fenced = False
    return fenced


def claims_for(scope: Scope, runs: list[Batch], docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims of a batch's entries, each pointing at the document of its run."""
    return [
        claim_doc(scope, entry.id, wire, doc["seq"])
        for run, doc in zip(runs, docs, strict=True)
        for entry, wire in run
    ]


def stored_lookup(stored: dict[str, Any]) -> Callable[[str], str | None]:
    """``plan_append``'s view of what is stored: the wire of an ID, or ``None``; a stored
    value that is not a string compares unequal to every wire (a conflict, never a skip). A
    claim without its entry counts as not stored: nothing of that append was stored."""

    def wire_of(eid: str) -> str | None:
        found = stored.get(eid)
        if found is None:
            return None
        return found if isinstance(found, str) else ""

    return wire_of


async def stored_wires(
    entries: Any, scope: Scope, todo: Batch, claims: dict[str, Claim], mine: dict[str, int]
) -> dict[str, Any]:
    """``{entry_id: wire}`` of the IDs of ``todo`` that are stored: in the document their
    claim points at (every stored entry has a claim pointing at its document)."""
    wanted = {entry.id for entry, _ in todo}
    places: set[int] = set()
    for entry, _ in todo:
        key = scope.key(entry.id)
        held = mine.get(key, getattr(claims.get(key), "seq", None))
        if held is not None:
            places.add(held)
    ids = sorted(scope.at(seq) for seq in places)
    projection = {"keys": 1, "wires": 1, "fence": 1}
    docs = await find_ids(entries, ids, projection, session_id=scope.sid)
    out: dict[str, Any] = {}
    for doc in docs:
        for eid, wire in stored_entries(scope, doc):
            if eid in wanted and eid not in out:
                out[eid] = wire
    return out


class Guard(NamedTuple):
    """A compare-and-append's condition (docs/design.md#mongo-store): the batch's entry IDs
    (``own``) and the entry expected newest besides them (``last``; ``None``: there is none)."""

    own: frozenset[str]
    last: str | None

    def holds(self, scope: Scope, keys: list[str]) -> bool:
        """The last of ``keys`` (entry keys in append order) not of the batch is ``last``."""
        own = {scope.key(eid) for eid in self.own}
        found = next((key for key in reversed(keys) if key not in own), None)
        return found == (None if self.last is None else scope.key(self.last))


class NotLast(Exception):
    """A guarded append found another entry newest before it; nothing of the batch stays (the
    store answers ``False``, never raises it)."""
