"""How MongoStore writes one append: one batch document (docs/design.md#mongo-store; the
layout is :mod:`~durable_agent.stores.mongo.batches`).

**A new batch is three round trips** (:mod:`~durable_agent.stores.mongo.claims` has the claims
and slots): one ordered ``insert_many`` of the slot at the end this store object knows and the
batch's claims, one ``insert_one`` of the batch document (a single document is written all or
nothing), then a primary-key read of the session document: if its incarnation is gone, a delete
ran meanwhile and may have missed the batch, so the append removes what that incarnation left
and raises ``SessionNotFoundError`` (:meth:`BatchWriter.write`). A writer that does not know the
session yet reads the session document's incarnation and ``next_seq`` hint first, and a batch
whose parent is not the entry this object wrote last reads the parent's claim: a parent the
incarnation does not hold raises ``ParentNotFoundError`` before anything is written.

**The careful path**, when an ID of the batch is claimed already: the claims and the documents
they point at are read by ``_id``; stored identical entries are skipped, a stored ID with other
content raises ``EntryConflictError`` (and this call's claims are released: nothing of the batch
stays). An ID claimed but not stored (its writer crashed between the claim and the insert, or is
still in flight) is taken over only after a **fence** went in at the place of its claimer's
document: a document ``{_id, session_id, inc, seq, fence: true}`` with that document's ``_id``
and ``seq``, so the claimer's document can never land afterwards (both unique keys are enforced
by every server, FerretDB included, unlike the multikey index on ``keys``). Whichever went in
first, the claimer's document or the fence, decides: an entry is stored at most once, and the
first writer to store it wins. To keep two writers from fencing each other in turn, a writer
fences at once only documents placed before its own first slot; a claim that a later writer
moved is waited for (that writer is between moving its claims and inserting its document, and a
writer that gives up such a place fences it itself).

**Patience is time, not rounds.** A writer that has waited ``abandon_after`` (its own clock) for
one such place fences it, as a reader fences a slot that old
(:mod:`~durable_agent.stores.mongo.tail`): that writer stalled or died, and if it was only slow
it finds the fence when its insert fails and moves its batch to a later slot. So a stalled writer
never makes an append fail; an append gives up (``StoreUnavailableError``, retryable) only once
it has spent ``abandon_after + PATIENCE_MARGIN`` on the careful path, which covers that one wait
plus the round trips before and after it: what is left is writers that keep stalling in turn,
or damage nothing settles. Two live writers never fence each other in turn: each one lands
within ``abandon_after`` of moving its claims.

**A slot given up is fenced** by the writer that gives it up (its claims found taken, a document
that hit a fence, nothing left to store), so a reader never waits for it
(:mod:`~durable_agent.stores.mongo.tail`). A reader may also fence the place of a slot that waited
too long for its document; the writer then finds that fence, like any other, when its insert
fails, and stores the batch in a later slot.

**A guarded append** (a compare-and-append: a person's decision, a fork's copy,
docs/design.md#mongo-store) checks before each landing that every place before its slot is
settled and that the newest entry there not of its batch is the one expected
(:meth:`BatchWriter._check`): a gap below its first slot is fenced at once, a later one waited
for; another entry newest there rolls it back (:class:`~.batches.NotLast`).

**Large batches**, split into several documents, are inserted with one ordered
``insert_many``: a failure can leave a prefix of them (a retry completes it), and a conflict
found after one of them went in replaces what this call inserted with fences before raising.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pymongo.errors import BulkWriteError, DuplicateKeyError

from ...session.appendplan import outside_parents, plan_append
from ...session.errors import (
    CorruptSessionError,
    EntryConflictError,
    ParentNotFoundError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from .batches import (
    Batch,
    Guard,
    NotLast,
    claims_for,
    documents,
    fence_doc,
    fence_places,
    split_documents,
    stored_lookup,
    stored_wires,
)
from .claims import Claim, Claims, first_error_index, only_duplicate_keys, slot_doc
from .incarnation import Scope, SessionEnds, incarnation_of, purge
from .tail import TailReader

__all__ = ["PATIENCE_MARGIN", "BatchWriter"]

#: Seconds an append keeps trying on its careful path beyond ``abandon_after`` (module doc).
PATIENCE_MARGIN = 10.0


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Gone(Exception):
    """The incarnation an append wrote to was deleted meanwhile; ``replaced``: the session was
    created again since."""

    def __init__(self, replaced: bool) -> None:
        super().__init__("incarnation deleted")
        self.replaced = replaced


class BatchWriter:
    """Writes encoded, de-duplicated batches as batch documents (module doc)."""

    def __init__(
        self,
        sessions: Any,
        entries: Any,
        claims: Claims,
        *,
        abandon_after: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._entries = entries
        self._claims = claims
        self._tail = TailReader(entries, claims, abandon_after)  # a guarded append's reads
        self._ends = SessionEnds()
        self._last: dict[str, tuple[str, str, int | None]] = {}
        """Session -> (incarnation, ID, its slot's end or ``None``) of the last entry written."""
        self._abandon_after = abandon_after
        self._clock = clock

    def seen(self, sid: str, session: dict[str, Any], end: int) -> None:
        """A load read the session document and its entries up to ``end``: the next append
        needs no preparation and starts at the later of ``end`` and the ``next_seq`` hint
        (both slot boundaries)."""
        hint = session.get("next_seq", 0)
        inc = session.get("inc")
        if _int(hint) and isinstance(inc, str):
            self._ends.raise_to(Scope(sid, inc), max(end, hint))

    def created(self, scope: Scope) -> None:
        """This object created the session (``next_seq`` 0)."""
        self._ends.raise_to(scope, 0)

    def forget(self, sid: str) -> None:
        self._ends.pop(sid, None)
        self._last.pop(sid, None)

    async def write(self, sid: str, todo: Batch, guard: Guard | None = None) -> None:
        """Write ``todo`` to the session's current incarnation (module doc): when this object's
        view is old (deleted and created again elsewhere), what it wrote to the old one goes and
        the batch goes to the new one, if that holds its parents (``ParentNotFoundError``).
        ``guard``: a guarded append's condition (:meth:`_check`)."""
        known = self._ends.get(sid)
        parents = outside_parents(todo, {entry.id for entry, _ in todo})
        while True:
            scope, first = (Scope(sid, known[0]), known[1]) if known else await self._prepare(sid)
            last = self._last.get(sid, ("", "", None))[:2]  # a run's appends chain: no read
            orphans = await self._claims.orphans(
                scope, {e: p for e, p in parents.items() if last != (scope.inc, p)}
            )
            if orphans and known is not None:  # this object's view may be old: read it again
                self.forget(sid)
                known = None
                continue
            for entry_id, parent in orphans.items():
                raise ParentNotFoundError(sid, entry_id, parent)
            try:
                end = await self._write(scope, first, todo, guard)
                self._last[sid] = (scope.inc, todo[-1][0].id, end)
                if len(self._last) > len(self._ends) + 1:  # bounded as the ends are
                    self._last = {k: v for k, v in self._last.items() if k in self._ends}
                return
            except _Gone as gone:
                self.forget(sid)
                if known is None or not gone.replaced:
                    raise SessionNotFoundError(sid) from None
                known = None  # only this object's view was old: write to the new session

    async def _prepare(self, sid: str) -> tuple[Scope, int]:
        """Read the session document (it must exist): its incarnation and the first slot
        boundary to try, its ``next_seq`` hint."""
        session = await self._sessions.find_one({"_id": sid}, {"inc": 1, "next_seq": 1})
        if session is None:
            raise SessionNotFoundError(sid)
        hint = session.get("next_seq", 0)
        if not _int(hint):
            raise CorruptSessionError(sid, f"bad session document: next_seq is {hint!r}")
        scope = Scope(sid, incarnation_of(sid, session))
        self._ends.raise_to(scope, int(hint))
        return scope, self._ends[sid][1]

    async def _write(
        self, scope: Scope, first: int, todo: Batch, guard: Guard | None
    ) -> int | None:
        """The fast path: claim the slot and the IDs in one insert, then insert the document,
        then confirm the incarnation; a claimed ID, or a fence at this batch's place, takes
        :meth:`_careful`; where the batch's slot ends (``None``: not known). A guarded append
        whose slot directly follows that of the entry it expects newest, written by this object,
        skips :meth:`_check`: nothing can come between (a chained append, with no reads)."""
        runs = split_documents(scope.prefix, todo)
        count = len(todo)
        while True:
            docs = documents(scope, runs, first)
            claims = [slot_doc(scope, first, count), *claims_for(scope, runs, docs)]
            done = await self._claims.insert(claims)
            if done:
                break
            first = await self._claims.walk(scope, first)  # the slot is taken: another writer
        self._ends.raise_to(scope, first + count)
        mine = {c["_id"]: c["q"] for c in claims[1:done]}
        ours: list[int] = []  # places of documents of a split batch stored before a duplicate key
        try:
            if done == len(claims):
                if guard is None or self._last.get(scope.sid) != (scope.inc, guard.last, first):
                    await self._check(scope, first, first, guard, (ours, mine, [first]))
                if await self._land(scope, docs, ours):
                    await self._confirm(scope)
                    return first + count
            else:  # this slot stays empty: fenced, so readers pass it at once
                await fence_places(self._entries, scope, [first])
            await self._careful(scope, todo, mine, (first, first + count), ours, guard)
        except (EntryConflictError, NotLast):
            await self._confirm(scope)  # a conflict in a deleted incarnation is none
            raise
        await self._confirm(scope)
        return None

    async def _check(
        self,
        scope: Scope,
        end: int | None,
        birth: int,
        guard: Guard | None,
        held: tuple[list[int], dict[str, int], list[int]],
    ) -> None:
        """For a guarded append about to land at place ``end`` (``None``: storing nothing, so
        every stored document counts), :class:`NotLast` unless the newest entry before it not of
        the batch is the one ``guard`` expects: then this call's documents, claims and places
        (``held``) go first. Every gap before ``end`` is settled first
        (:meth:`TailReader.keys_before`), so no append that could still land before this one is
        missed. It reads the outline from the expected entry's document on (by ``_id`` alone
        when nothing lies between), the whole outline for a fork's copy."""
        if guard is None:
            return
        patience = self._abandon_after + PATIENCE_MARGIN
        since = "" if guard.last is None else scope.key(guard.last)
        keys = await self._tail.keys_before(scope, end, birth, patience, since)
        if guard.holds(scope, keys):
            return
        ours, mine, places = held
        await self._roll_back(scope, ours, mine)
        await fence_places(self._entries, scope, places)
        raise NotLast

    async def _land(self, scope: Scope, docs: list[dict[str, Any]], ours: list[int]) -> bool:
        """Insert a batch's documents; ``False`` if one hit a fence (another writer or a reader
        fenced its place) or a key stored elsewhere: then those stored before it are added to
        ``ours``, and its place and those after it are fenced, so every claim pointing at a
        document of this attempt may be taken over, and no reader waits for them."""
        try:
            await self._insert(docs)
        except DuplicateKeyError:
            stored = 0
        except BulkWriteError as exc:
            if not only_duplicate_keys(exc):
                raise
            stored = first_error_index(exc)
            ours.extend(doc["seq"] for doc in docs[:stored])
        else:
            return True
        # Usually a fence is there already; an entry key stored elsewhere (a claim taken over)
        # leaves the place empty: fenced either way, so readers never wait for it.
        await fence_places(self._entries, scope, [doc["seq"] for doc in docs[stored:]])
        return False

    async def _confirm(self, scope: Scope) -> None:
        """The session document still has the incarnation written to, so a delete has not begun
        and will find what was written; otherwise remove it all and raise :class:`_Gone`."""
        session = await self._sessions.find_one({"_id": scope.sid}, {"inc": 1})
        current = None if session is None else session.get("inc")
        if current != scope.inc:
            await purge(self._entries, self._claims, scope)
            raise _Gone(replaced=current is not None)

    async def _careful(
        self, scope: Scope, todo: Batch, mine: dict[str, int], slot: tuple[int, int],
        ours: list[int], guard: Guard | None,
    ) -> None:  # fmt: skip
        """Look up what the batch's claims say, skip what is stored, write the rest in a fresh
        slot (``mine``: claims this call holds, by key, with the seq of their document;
        ``slot``: this call's first slot and its end; ``ours``: places of documents it stored,
        fenced on a conflict). Gives up after ``abandon_after + PATIENCE_MARGIN`` seconds."""
        birth, above = slot
        patience = self._abandon_after + PATIENCE_MARGIN
        deadline = self._clock() + patience
        waiting: dict[int, float] = {}  # a later writer's place -> when first found empty
        waits = 0
        while self._clock() < deadline:
            keys = [scope.key(entry.id) for entry, _ in todo]
            claims = await self._claims.claims(k for k in keys if k not in mine)
            stored = await stored_wires(self._entries, scope, todo, claims, mine)
            try:
                todo = plan_append(scope.sid, todo, stored_lookup(stored))
            except EntryConflictError:
                await self._roll_back(scope, ours, mine)
                raise
            if not todo:
                return await self._check(scope, None, birth, guard, (ours, mine, []))
            taken = {k: claims[k] for k in (scope.key(e.id) for e, _ in todo) if k in claims}
            if not await self._fence(scope, taken, birth, waiting):
                # A later writer's document is in flight: back off, 1 ms doubling up to 100 ms.
                await asyncio.sleep(min(0.001 * 2 ** min(waits, 7), 0.1))
                waits += 1
                continue
            first = await self._claims.take_slot(scope, above, len(todo))
            above = first + len(todo)
            self._ends.raise_to(scope, above)
            runs = split_documents(scope.prefix, todo)
            docs = documents(scope, runs, first)
            if not await self._hold(scope, claims_for(scope, runs, docs), claims, mine):
                # Abandoned: fenced, so the claims already moved here may be taken over (a
                # writer that started before this slot waits for them otherwise, while this
                # call may be waiting for it).
                await fence_places(self._entries, scope, [doc["seq"] for doc in docs])
                continue
            await self._check(scope, first, birth, guard, (ours, mine, [d["seq"] for d in docs]))
            if await self._land(scope, docs, ours):
                return
        raise StoreUnavailableError(
            f"session {scope.sid!r}: append gave up after {patience:g} s: entries it needs were "
            "claimed by other writers and neither stored nor given up meanwhile (retry it)"
        )

    async def _fence(
        self, scope: Scope, taken: dict[str, Claim], birth: int, waiting: dict[int, float]
    ) -> bool:
        """Make sure the documents other writers' claims in ``taken`` (by key) point at can
        never land (their entries are not stored): a fence at each one's place. A place after
        this call's first slot is fenced only once this call has waited ``abandon_after`` for it
        (``waiting``: since when, by place); until then its writer, which started later, may be
        placing it. A place holding a document without the claimed entries is as good: no
        document can land there any more (FerretDB goes on past a taken slot in an ordered
        insert of over 100 documents, leaving claims that point at another append's document).
        ``False`` when one is not settled (it landed meanwhile, or is still being placed): look
        again."""
        now = self._clock()
        for seq in sorted({claim.seq for claim in taken.values() if claim.seq is not None}):
            stalled = seq in waiting and now - waiting[seq] >= self._abandon_after
            if (seq < birth or stalled) and await fence_places(self._entries, scope, [seq]):
                continue
            there = await self._entries.find_one({"_id": scope.at(seq)}, {"fence": 1, "keys": 1})
            if there is None:
                waiting.setdefault(seq, now)
                return False
            keys = there.get("keys")
            held = {key for key, claim in taken.items() if claim.seq == seq}
            if not there.get("fence") and not (isinstance(keys, list) and held.isdisjoint(keys)):
                return False
        return True

    async def _hold(
        self,
        scope: Scope,
        wanted: list[dict[str, Any]],
        claims: dict[str, Claim],
        mine: dict[str, int],
    ) -> bool:
        """Hold every claim of ``wanted`` for this call, pointing at its new document: insert
        the new ones, move the ones this call holds or takes over (only if nobody moved them
        first). ``False`` if a racing writer got one first: look again."""
        new = [c for c in wanted if c["_id"] not in mine and c["_id"] not in claims]
        done = await self._claims.insert(new)
        mine.update((c["_id"], c["q"]) for c in new[:done])
        if done < len(new):
            return False
        moves = []
        for claim in wanted:
            key = claim["_id"]
            held = mine[key] if key in mine else claims[key].seq
            if held != claim["q"]:
                moves.append((claim, held))
        moved = await self._claims.move(moves)
        for claim, _ in moves:
            if claim["_id"] in moved:
                mine[claim["_id"]] = claim["q"]
            else:
                mine.pop(claim["_id"], None)  # another writer took it over: no longer this call's
        return len(moved) == len(moves)

    async def _insert(self, docs: list[dict[str, Any]]) -> None:
        if len(docs) == 1:
            await self._entries.insert_one(docs[0])
        else:
            await self._entries.insert_many(docs, ordered=True)

    async def _roll_back(self, scope: Scope, docs: list[int], claims: dict[str, int]) -> None:
        """Remove what this call wrote before it found a conflict (nothing of a conflicting batch
        stays, docs/design.md#store-contract): its documents, each replaced by a fence (its
        place stays settled for readers), then its claims (its slots stay, gaps in ``seq``)."""
        for seq in docs:
            await self._entries.replace_one({"_id": scope.at(seq)}, fence_doc(scope, seq))
        await self._claims.release(claims)
