"""Incarnations: what keeps a deleted MongoDB session deleted (docs/design.md#retention).

MongoStore runs without transactions, so a delete cannot remove a session's documents at one
instant while appends from other processes keep arriving. Instead every session document gets a
random **incarnation** token when it is created, and everything written for the session carries
it: batch documents hold it in ``inc``, claims and slots (and fences) in their ``_id``, which is
``<session_id>/<incarnation>…``. So:

- a load reads only the documents of the session document's incarnation: whatever an earlier
  session under the same ID left behind (a delete that died half-way, an append that raced the
  delete) never reaches the session created again, and cannot collide with its IDs or slots;
- a delete removes the session document first, then everything of that incarnation, then
  everything of any other incarnation that is not the current one (a delete that died before
  finishing leaves a **half-deleted** session: deleting it again finishes the job);
- an append re-reads the session document after its batch document went in
  (:func:`confirm`): if the incarnation is gone, the delete may have missed the batch, so the
  append removes everything of that incarnation itself and raises ``SessionNotFoundError``.
  An append that saw its incarnation still there was stored before the delete began, and the
  delete removes it with the rest.

Every query stays keyed by the session ID: ``session_id`` (plus ``inc``) on batch documents, an
``_id`` range over ``<session_id>/…`` on claims, slots (plus ``i``, their incarnation) and live
deltas.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any, NamedTuple

from ...session.errors import CorruptSessionError

__all__ = [
    "Scope",
    "SessionEnds",
    "bury",
    "id_range",
    "incarnation_of",
    "new_incarnation",
    "purge",
]

#: Sessions whose incarnation and end a store object remembers (LRU).
_CACHE_SIZE = 4096


def new_incarnation() -> str:
    """A fresh incarnation token (64 random bits, hex): never the same for two creates."""
    return secrets.token_hex(8)


def incarnation_of(sid: str, session: dict[str, Any]) -> str:
    """The incarnation of a session document; a document without one is damaged."""
    inc = session.get("inc")
    if not isinstance(inc, str) or not inc:
        raise CorruptSessionError(sid, f"bad session document: inc is {inc!r}")
    return inc


def id_range(sid: str) -> dict[str, str]:
    """An ``_id`` filter for every ID that starts with ``<sid>/`` (a session ID holds no ``/``,
    so no other session's IDs; ``0`` is the character after ``/``): an index range, not a
    scan, on MongoDB."""
    return {"$gte": f"{sid}/", "$lt": f"{sid}0"}


class Scope(NamedTuple):
    """One incarnation of a session: what every key of its documents starts with."""

    sid: str
    inc: str

    @property
    def prefix(self) -> str:
        return f"{self.sid}/{self.inc}"

    def key(self, entry_id: str) -> str:
        """An entry's key: its claim's ``_id`` and its element of a batch document's ``keys``."""
        return f"{self.prefix}/{entry_id}"

    def at(self, seq: int) -> str:
        """The ``_id`` of the slot at ``seq`` (claims collection) and of the batch document or
        fence at ``seq`` (entries collection)."""
        return f"{self.prefix}#{seq}"

    def entry_id(self, key: str) -> str | None:
        """The entry ID of one of this incarnation's keys; ``None`` for any other string."""
        head = self.prefix + "/"
        return key[len(head) :] if key.startswith(head) else None


class SessionEnds(OrderedDict[str, tuple[str, int]]):
    """Per session, the incarnation this store object last saw and the slot boundary where it
    puts its next append (one past the highest ``seq`` it wrote or loaded: a writer's appends
    keep their order); LRU-bounded. A floor never outlives its incarnation."""

    def raise_to(self, scope: Scope, end: int) -> None:
        inc, known = self.get(scope.sid, ("", 0))
        self[scope.sid] = (scope.inc, max(end, known) if inc == scope.inc else end)
        self.move_to_end(scope.sid)
        while len(self) > _CACHE_SIZE:
            self.popitem(last=False)


async def bury(
    sessions: Any, entries: Any, claims: Any, sid: str, deleted: dict[str, Any] | None
) -> None:
    """Remove everything of the incarnation of ``deleted`` (the session document a delete
    just removed, if any), and of any other incarnation that is not the current one (what a
    delete that died half-way, or an append that raced one, left behind). The current
    incarnation is read last, so a session created meanwhile is spared. (``claims``: the
    store's :class:`~.claims.Claims`.)"""
    dead = set(await entries.distinct("inc", {"session_id": sid}))
    dead |= await claims.incarnations(sid)
    current = await sessions.find_one({"_id": sid}, {"inc": 1})
    dead.discard(None if current is None else current.get("inc"))
    if deleted is not None:
        dead.add(deleted.get("inc"))
    for inc in sorted(i for i in dead if isinstance(i, str)):
        await purge(entries, claims, Scope(sid, inc))


async def purge(entries: Any, claims: Any, scope: Scope) -> None:
    """Everything of one incarnation: batch documents and fences, then claims and slots."""
    await entries.delete_many({"session_id": scope.sid, "inc": scope.inc})
    await claims.purge(scope)
