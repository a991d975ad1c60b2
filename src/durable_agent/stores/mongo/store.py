"""MongoStore: sessions in MongoDB or a wire-compatible server such as FerretDB.

The design is docs/design.md#mongo-store. ``sessions`` holds one document per session,
``{_id: session_id, inc, parent_id, created_at, next_seq}``, ``inc`` being the session's
incarnation (:mod:`~durable_agent.stores.mongo.incarnation`: what keeps a deleted session
deleted). ``entries`` holds **one document per append**
(:mod:`~durable_agent.stores.mongo.writer`), its entries kept as their exact ``encode_entry``
strings (a byte-exact round trip; keys such as ``$x`` or ``a.b`` inside an entry never become
field names), and ``<entries>_claims`` a claim per entry and a slot per append
(:mod:`~durable_agent.stores.mongo.claims`): small documents found by ``_id``, never read by a
load, that make appends idempotent and ordered without a counter or a transaction (the store
runs on a standalone ``mongod`` and on FerretDB). A new batch is one ordered ``insert_many`` of
its slot and claims, one ``insert_one`` of its document, then a primary-key read of the session
document confirming it was not deleted meanwhile.

Why one document per append: FerretDB parses every document of a collection on a load (10k
entries: 333 ms, 581 ms at one document per entry); on MongoDB a load is an index scan either way.

Unique ``_id`` (claims, slots, batch documents and fences) and unique indexes on
``(session_id, inc, seq)`` and ``keys`` make the database the referee between concurrent
writers. An unused slot leaves a gap in ``seq``: ``seq`` orders, it does not count.

**A load is one round trip of latency:** the session document and one ``find`` sorted by
incarnation and ``seq`` (one large cursor batch) go out together; the documents of the session
document's incarnation are kept. :meth:`MongoStore.load_entries_after` reads only the entries
after a sequence number (:meth:`~MongoStore.last_entries` the last ones), up to an append still
in flight before them, so a seq once read never changes (:mod:`.tail`).

**What a failed append leaves** (docs/design.md#store-contract): on ``EntryConflictError``
nothing of the batch; after any other failure the whole batch or nothing (a batch over MongoDB's
16 MiB limit is split across documents and may leave a prefix of them); a retry completes it.

**Deleted means deleted** (docs/design.md#retention): the session's incarnation referees a
delete and the appends racing it (:mod:`~durable_agent.stores.mongo.incarnation`).

It takes a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase`` (the methods both have).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from bson.codec_options import CodecOptions
from pydantic import ValidationError
from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from ...session.appendplan import encode_batch, plan_append
from ...session.entries import Entry
from ...session.errors import (
    CorruptSessionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ...session.ids import validate_session_id
from ...session.store import Closing, SessionRecord, check_after, check_page
from ..appends import Watch
from .batches import Guard, NotLast
from .claims import Claims
from .decode import (
    LOAD_BATCH_SIZE,
    LOAD_PROJECTION,
    OUTLINE_PROJECTION,
    StartedWrites,
    decode_documents,
    end_seq,
    now_ms,
    of_incarnation,
    retrieve,
    servers_of,
    translate_errors,
)
from .deltas import MongoDeltas
from .feed import ChangeFeed
from .incarnation import Scope, bury, incarnation_of, new_incarnation
from .tail import ABANDON_AFTER, TailReader
from .writer import BatchWriter

if TYPE_CHECKING:
    from motor.motor_asyncio import AsyncIOMotorDatabase

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MongoStore"]

#: Largest ``encode_entry`` output accepted: 1 MiB under MongoDB's 16 MiB document limit.
DEFAULT_MAX_ENTRY_BYTES = 15 * 1024 * 1024

#: Outline reads before a read gives up on documents that keep changing (a fenced batch, a delete).
_READ_ROUNDS = 3


class MongoStore(Closing):
    """A :class:`~durable_agent.session.Store` on MongoDB collections (module doc).

    ``database`` is a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase``. The unique
    indexes are created on first use by each store object (or up front with
    :meth:`ensure_indexes`). Server-selection, connection and timeout errors raise
    ``StoreUnavailableError``; how long a call waits for a down server is the client's
    ``serverSelectionTimeoutMS`` (or ``timeoutMS``). ``abandon_after``: seconds
    :meth:`load_entries_after`, or an append that needs its entries, waits for an append that
    took its slot but has not stored its document before it fences that place and goes on
    (that append then stores its batch later; :mod:`~durable_agent.stores.mongo.tail`); an
    append gives up after ``abandon_after`` plus a margin (:mod:`.writer`).
    """

    def __init__(
        self,
        database: AsyncDatabase[Any] | AsyncIOMotorDatabase[Any],
        *,
        sessions_collection: str = "sessions",
        entries_collection: str = "entries",
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        abandon_after: float = ABANDON_AFTER,
    ) -> None:
        if isinstance(database, Database):
            raise TypeError(
                "MongoStore needs an async database: pymongo.AsyncMongoClient(...)[name] "
                "or a Motor AsyncIOMotorDatabase, not a synchronous pymongo Database"
            )
        if max_entry_bytes <= 0:
            raise ValueError("max_entry_bytes must be positive")
        if abandon_after < 0:
            raise ValueError("abandon_after must not be negative")
        # ours, whatever the client's: plain dicts, aware UTC datetimes (created_at reads equal)
        codec: CodecOptions[dict[str, Any]] = CodecOptions(
            document_class=dict, tz_aware=True, tzinfo=UTC
        )
        self._database = database
        self._sessions = database.get_collection(sessions_collection, codec_options=codec)
        self._entries = database.get_collection(entries_collection, codec_options=codec)
        self._max_entry_bytes = max_entry_bytes
        self._indexed = False
        self._index_lock = asyncio.Lock()
        claims = database.get_collection(f"{entries_collection}_claims", codec_options=codec)
        self._claims = Claims(claims, self._sessions)
        self._writer = BatchWriter(
            self._sessions, self._entries, self._claims, abandon_after=abandon_after
        )
        self._tail = TailReader(self._entries, self._claims, abandon_after)
        self._live: MongoDeltas | None = None
        self._feed = ChangeFeed(self._entries)
        self._writes = StartedWrites()

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        self._check_open()
        return translate_errors(what, self._address)

    async def _release(self) -> None:
        """Stop the change feed and let the writes already started finish (a started write
        completes). The client stays open: it is the application's, usually shared (PyMongo
        wants one per process), and closed by whoever built it."""
        self._feed.close()
        await asyncio.gather(*self._writes, return_exceptions=True)

    def _address(self) -> str:
        return servers_of(self._database)

    @property
    def database(self) -> AsyncDatabase[Any] | AsyncIOMotorDatabase[Any]:
        """The database this store was built on."""
        return self._database

    def live_deltas(self) -> MongoDeltas:
        """This store's live-delta channel (docs/design.md#live-deltas): a ``live_deltas``
        collection in the same database, so a worker and its clients find it from the store they
        share. One channel per store object."""
        if self._live is None:
            self._live = MongoDeltas(self._database, sessions=self._sessions)
        return self._live

    def watch_appends(self, session_id: str, wake: Callable[[], None]) -> Watch:
        """Call ``wake`` after each append to the session commits, where the server has change
        streams (:class:`~durable_agent.session.store.AppendFeed`, :mod:`.feed`), ID checked."""
        return self._feed.watch(validate_session_id(session_id), wake)

    async def ensure_indexes(self) -> None:
        """Create the two unique indexes if this store object has not yet. Concurrent first
        calls share one creation (the lock); several store objects or processes may all call it
        (``create_index`` is idempotent); after a failure the next call tries again."""
        if self._indexed:
            return
        async with self._index_lock:
            if self._indexed:
                return
            with self._errors("creating indexes"):
                # A load's sorted range, and one document or fence per place.
                await self._entries.create_index(
                    [("session_id", ASCENDING), ("inc", ASCENDING), ("seq", ASCENDING)],
                    unique=True,
                )
                # Every entry's key (sparse as first defined: options are fixed under a name).
                await self._entries.create_index("keys", unique=True, sparse=True)
            self._indexed = True

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Insert the session document; an existing ``_id`` raises ``SessionExistsError``."""
        sid = validate_session_id(session_id)
        # A fork source is a session ID and is validated like one; "" reads as no parent.
        parent = None if parent_id is None or parent_id == "" else validate_session_id(parent_id)
        created_at = now_ms()
        scope = Scope(sid, new_incarnation())
        doc = {
            "_id": sid,
            "inc": scope.inc,
            "parent_id": parent,
            "created_at": created_at,
            "next_seq": 0,
        }
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            try:
                await self._writes.complete(self._sessions.insert_one(doc))
            except DuplicateKeyError as exc:
                raise SessionExistsError(sid) from exc
        self._writer.created(scope)
        return SessionRecord(id=sid, parent_id=parent, created_at=created_at)

    async def load_session(self, session_id: str) -> SessionRecord:
        """The session's record as ``create_session`` wrote it."""
        sid = validate_session_id(session_id)
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            doc = await self._sessions.find_one({"_id": sid})
        if doc is None:
            raise SessionNotFoundError(sid)
        try:
            return SessionRecord(
                id=sid, parent_id=doc.get("parent_id"), created_at=doc.get("created_at")
            )
        except ValidationError as exc:
            raise CorruptSessionError(sid, f"decode session: bad session document: {exc}") from exc

    async def load_entries(self, session_id: str) -> list[Entry]:
        """Every entry of the session in append (``seq``) order."""
        sid = validate_session_id(session_id)
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            session, docs = await self._find(sid, LOAD_PROJECTION)
        self._writer.seen(sid, session, end_seq(sid, docs))
        return decode_documents(sid, docs)

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        """The entries after seq ``after`` (1-based positions in :meth:`load_entries`' order),
        at most ``limit``: every document's ``seq`` and keys read, then by ``_id`` the documents
        holding them, stopping before an append that may still be in flight before them, so a
        seq once read never changes (:mod:`~durable_agent.stores.mongo.tail`)."""
        sid = validate_session_id(session_id)
        return await self._read(sid, check_after(after, limit), limit)

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None:
        """The entry :meth:`load_entries_after` ends with and its seq, its document alone read."""
        found = await self.last_entries(session_id, 1)
        return found[-1] if found else None

    async def last_entries(self, session_id: str, count: int) -> list[tuple[int, Entry]]:
        """The last ``count`` entries and their seqs, in one read of the documents' outline."""
        return await self._read(validate_session_id(session_id), None, max(1, count))

    async def _read(self, sid: str, after: int | None, n: int | None) -> list[tuple[int, Entry]]:
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            for _ in range(_READ_ROUNDS):
                session, outline = await self._find(sid, OUTLINE_PROJECTION, fences=True)
                batches = [doc for doc in outline if not doc.get("fence")]
                self._writer.seen(sid, session, end_seq(sid, batches, "keys"))
                scope = Scope(sid, incarnation_of(sid, session))
                found = await self._tail.read(scope, outline, after, n)
                if found is not None:
                    return found
        raise StoreUnavailableError(f"session {sid!r}: its documents kept changing during a read")

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append in order, skipping identical stored IDs (docs/design.md#store-contract); all
        checks come before the first write, which completes if the caller is cancelled."""
        await self._append(session_id, entries, None)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """``append_entries`` only if the newest stored entry not of the batch is ``last_id``
        (``None``: none), atomically against appends from any process; ``False``, nothing of
        the batch written, otherwise (docs/design.md#store-contract, :mod:`.writer`). Newest
        in append order up to the batch's place: an append that took a later slot comes after
        the batch even if its document landed first."""
        if not entries:  # the condition alone: the newest entry's document read, not the log
            found = await self.last_entry(session_id)
            return (found[1].id if found else None) == last_id
        return await self._append(session_id, entries, last_id, guarded=True)

    async def _append(
        self, session_id: str, entries: Sequence[Entry], last: str | None, *, guarded: bool = False
    ) -> bool:
        sid = validate_session_id(session_id)
        batch = encode_batch(sid, list(entries), limit=self._max_entry_bytes)
        todo = plan_append(sid, batch, lambda _: None)  # repeats within the batch only
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            if not todo:
                await self._session_doc(sid)
                return True
            guard = Guard(frozenset(entry.id for entry, _ in todo), last) if guarded else None
            try:
                await self._writes.complete(self._writer.write(sid, todo, guard))
            except NotLast:
                return False
        return True

    async def _find(
        self, sid: str, projection: dict[str, int], *, fences: bool = False
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The session document and the documents of its incarnation (``projection``; its fences
        too if ``fences``), sorted by ``seq``. The session document is read alongside the fetch
        (one round trip of latency, not two), so the fetch takes every incarnation's documents,
        sorted by incarnation then ``seq`` (the index order), and those of the session
        document's one are kept (leftovers of a deleted session under the same ID are rare, and
        never read). A missing session raises ``SessionNotFoundError``, whatever the fetch
        found."""
        check = asyncio.ensure_future(self._session_doc(sid))
        check.add_done_callback(retrieve)
        try:
            cursor = self._entries.find(
                {"session_id": sid}, projection, batch_size=LOAD_BATCH_SIZE
            ).sort([("inc", ASCENDING), ("seq", ASCENDING)])
            docs: list[dict[str, Any]] = await cursor.to_list(None)  # a batch at once
        except BaseException:
            check.cancel()
            raise
        session = await check
        return session, of_incarnation(docs, incarnation_of(sid, session), fences=fences)

    async def _session_doc(self, sid: str) -> dict[str, Any]:
        """The session document's incarnation and ``next_seq``; it must exist."""
        doc: dict[str, Any] | None = await self._sessions.find_one(
            {"_id": sid}, {"inc": 1, "next_seq": 1}
        )
        if doc is None:
            raise SessionNotFoundError(sid)
        return doc

    # -- retention (RetentionStore) -------------------------------------------------------------

    async def list_sessions(
        self, *, limit: int = 100, offset: int = 0, prefix: str = ""
    ) -> list[SessionRecord]:
        """One page of session records, newest ``created_at`` first, then by ID; reads the
        ``sessions`` collection only (never entries). A damaged session document is skipped.

        ``prefix`` is an anchored, case-sensitive ``_id`` regex: MongoDB answers it from the
        ``_id`` index, scanning only the prefix's range, so a tenant's listing reads its own
        documents; FerretDB (1.24) answers it right but reads every session document to do so
        (its explain: no filter pushdown)."""
        prefix = check_page(limit, offset, prefix)
        projection = {"parent_id": 1, "created_at": 1}
        query = {"_id": {"$regex": "^" + re.escape(prefix)}} if prefix else {}
        with self._errors("listing sessions"):
            cursor = (
                self._sessions.find(query, projection)
                .sort([("created_at", -1), ("_id", 1)])
                .skip(offset)
                .limit(limit)
            )
            docs = [doc async for doc in cursor]
        records = []
        for doc in docs:
            try:
                records.append(
                    SessionRecord(
                        id=doc["_id"], parent_id=doc.get("parent_id"), created_at=doc["created_at"]
                    )
                )
            except (KeyError, ValidationError):
                continue
        return records

    async def delete_session(self, session_id: str) -> None:
        """Delete the session document, then everything of its incarnation, then whatever an
        earlier incarnation left behind, then its live deltas (docs/design.md#retention). The
        document goes first: an append that confirms its incarnation after that removes what it
        wrote itself. ``SessionNotFoundError`` if there was no session document; what a delete
        that died half-way left behind is removed all the same."""
        sid = validate_session_id(session_id)
        self._writer.forget(sid)
        with self._errors(f"session {sid!r}"):
            if not await self._writes.complete(self._delete(sid)):  # all of it, even if cancelled
                raise SessionNotFoundError(sid)

    async def _delete(self, sid: str) -> bool:
        doc = await self._sessions.find_one_and_delete({"_id": sid})
        await bury(self._sessions, self._entries, self._claims, sid, doc)
        await self.live_deltas().drop_session(sid)
        return doc is not None
