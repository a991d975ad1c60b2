"""How MongoStore turns the stored documents of a session back into entries, in either layout.

A session may hold documents of both layouts (one written before the batch layout, appended to
after): per-entry documents carry one ``wire``, batch documents a ``wires`` list
(:mod:`durable_agent.stores.mongo_batch`). One ``find`` sorted by ``seq`` returns both; a batch
document's entries sit at ``seq .. seq + len - 1``, so the order is the append order.

The store is trusted but may be corrupted: a document of the wrong shape, a ``seq`` that is not
an integer, or an entry that does not decode raises ``CorruptSessionError`` naming the entry. An
entry ID that appears twice (possible only on servers that do not enforce the unique multikey
index, FerretDB, when two different batches sharing it raced) is returned once if the copies are
identical, and raises ``CorruptSessionError`` if they differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..session.codec import bulk_decoding, decode_entry
from ..session.entries import Entry
from ..session.errors import CorruptSessionError, EntryDecodeError

__all__ = ["LOAD_PROJECTION", "decode_documents", "end_seq"]

#: The fields a load reads, of both layouts.
LOAD_PROJECTION = {"_id": 0, "entry_id": 1, "seq": 1, "wire": 1, "wires": 1}


def _seq(sid: str, doc: dict[str, Any]) -> int:
    seq = doc.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise CorruptSessionError(
            sid, f"decode entry {doc.get('entry_id')!r}: seq is {seq!r}, not an integer"
        )
    return seq


def _wires(sid: str, doc: dict[str, Any]) -> Iterator[str]:
    """The wire strings of one document, of either layout, checked to be strings."""
    if "wires" in doc:
        wires = doc["wires"]
        if not isinstance(wires, list) or not all(isinstance(w, str) for w in wires):
            raise CorruptSessionError(
                sid, f"decode batch at entry {doc.get('entry_id')!r}: wires is not a string list"
            )
        yield from wires
        return
    wire = doc.get("wire")
    if not isinstance(wire, str):
        raise CorruptSessionError(sid, f"decode entry {doc.get('entry_id')!r}: no wire string")
    yield wire


def end_seq(sid: str, docs: list[dict[str, Any]]) -> int:
    """One past the highest ``seq`` the documents (sorted by ``seq``) use; 0 for none.

    Checks every ``seq`` first, so a bad one raises before anything is decoded.
    """
    end = 0
    for doc in docs:
        seq = _seq(sid, doc)
        wires = doc.get("wires")
        end = max(end, seq + (len(wires) if isinstance(wires, list) else 1))
    return end


def decode_documents(sid: str, docs: list[dict[str, Any]]) -> list[Entry]:
    """Every entry of ``docs`` (sorted by ``seq``), decoded, in order (module doc)."""
    out: list[Entry] = []
    seen: dict[str, str] = {}
    with bulk_decoding():
        for doc in docs:
            for wire in _wires(sid, doc):
                try:
                    entry = decode_entry(wire)
                except EntryDecodeError as exc:
                    raise CorruptSessionError(
                        sid, f"decode entry {doc.get('entry_id')!r}: {exc}"
                    ) from exc
                first = seen.get(entry.id)
                if first is not None:
                    if first != wire:
                        raise CorruptSessionError(
                            sid, f"entry {entry.id!r} is stored twice with different content"
                        )
                    continue
                seen[entry.id] = wire
                out.append(entry)
    return out
