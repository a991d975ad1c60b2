"""MongoStore: sessions in MongoDB (or a wire-compatible server such as FerretDB), SPEC §2.3.

``sessions`` holds one document per session, ``{_id: session_id, parent_id, created_at, next_seq}``
(and ``claims: 1`` once the batch layout claims its entries). Entries are stored as their exact
``encode_entry`` strings (a byte-exact round trip; keys such as ``$x`` or ``a.b`` inside an entry
never become field names), in ``entries``, in one of two layouts, chosen per store object with
``layout=`` (loads read both, sorted by ``seq``, so a session written in the old layout keeps
loading and appending):

- ``"batch"`` (the default): one document per ``append_entries`` call,
  ``{_id, session_id, entry_id, seq, keys, wires}``, plus a claim per entry and a slot per
  append in ``<entries>_claims`` (small documents found by ``_id``, never read by a load). A
  new batch is two writes, like the peer's session store: one ordered ``insert_many`` of its
  slot and claims, then one ``insert_one`` of its document (written all or nothing); a batch
  with a claimed ID looks up the claims and the documents they point at. Loads read a tenth of
  the documents of 10-entry appends, which is what FerretDB's per-document cost needs. See
  :mod:`~durable_agent.stores.mongo_batch` and :mod:`~durable_agent.stores.mongo_claims`. A
  session written by batch writers must not be appended to in the per-entry layout afterwards
  (those entries would have no claims, and its counter would stop being a slot boundary; so
  upgrade every worker before the first batch append, or keep ``layout="entry"`` until then);
  a per-entry session moves to batches on its first batch append, which gives what is stored
  claims and marks the session (``claims: 1``).
- ``"entry"``: one document per entry, ``{_id, session_id, entry_id, seq, type, created_at,
  wire}``; an append reserves ``seq`` numbers, then one ordered ``insert_many`` whose duplicate
  keys are the idempotency check, and a conflict deletes the prefix it stored. See
  :mod:`~durable_agent.stores.mongo_append`.

Why batches are the default (issue 12, FerretDB 1.24, ``PEERS_MONGO_LAYOUTS=entry,batch``
``bench/peers/run.py --only 3``, medians of 3, ratios to the OpenAI Agents SDK's
``MongoDBSession`` on the same server, idle machine, 2026-12-04): the batch layout loads 10k
entries in 333 ms (1.89x the peer; per-entry 581 ms, 3.3x; about a third of it is decoding) and
appends 1 / 10 entries in 1.50 / 2.10 ms p50 (0.96x / 1.24x; per-entry 1.66 / 2.35), and 20
concurrent sessions write 745 entries/s against 558 per entry (peer 514). FerretDB parses every
document of the collection on a load, so the document count decides it; on MongoDB both layouts
are index lookups.

An entry's key is ``"<session_id>/<entry_id>"`` (unambiguous: session IDs have no ``/``); it is
the ``_id`` of a per-entry document, of a batch document whose first entry it is, and of the
entry's claim. Unique ``_id`` (claims, slots) and unique indexes on ``(session_id, entry_id)``,
``(session_id, seq)`` and (sparse) ``keys`` make the database the referee between concurrent
writers, without multi-document transactions (the store runs on a standalone ``mongod`` and on
FerretDB). A reservation or slot never used leaves a gap in ``seq``, which is harmless.

**A load is one round trip of latency:** the session check and one ``find`` sorted by ``seq``
(projection of the entry fields of both layouts; one large cursor batch) go out together.

**What a failed append leaves** (SPEC §2.1): on ``EntryConflictError`` (an ID stored with other
content; the first writer wins) nothing of the batch; after any other failure, in the batch
layout the whole batch or nothing (one document; a batch over MongoDB's 16 MiB limit is split
across documents and may leave a prefix of them), in the entry layout a prefix. A retry of the
same batch completes it by idempotency.

On servers whose ``$inc`` is not atomic (FerretDB 1.x) each store object's sequence floor keeps a
writer's appends in order and loses nothing (:mod:`~durable_agent.stores.mongo_append`); the
batch layout needs no ``$inc`` (its slots are inserts, refereed by ``_id``).

**A session deleted by another process:** a batch-layout store object trusts for
``VERIFY_INTERVAL`` (1 s) that a session it created, loaded or checked still exists, and checks
the session document alongside the claims insert after that; an append through it within that
second of a delete elsewhere can leave orphaned entries and claims (the per-entry layout has the
same race within one round trip). ``delete_session`` removes the session's claims and slots
last.

The store accepts a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase``: it uses only
the coroutine methods the two share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import ValidationError

try:
    from bson.codec_options import CodecOptions
    from pymongo import ASCENDING
    from pymongo.asynchronous.database import AsyncDatabase
    from pymongo.database import Database
    from pymongo.errors import DuplicateKeyError
except ImportError as _missing:  # the mongo extra is not installed: say which one to install
    raise ImportError(
        f"MongoStore needs PyMongo ({_missing}): pip install 'durable-agent[mongo]'",
        name=_missing.name,
    ) from None

from ..session.appendplan import encode_batch, plan_append
from ..session.entries import Entry
from ..session.errors import (
    CorruptSessionError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..session.ids import validate_session_id
from ..session.record import SessionRecord
from .mongo_append import BatchWriter, SeqFloors
from .mongo_batch import CLAIMED, BatchDocumentWriter
from .mongo_claims import Claims
from .mongo_deltas import MongoDeltas
from .mongo_errors import translate_errors
from .mongo_read import LOAD_PROJECTION, decode_documents, end_seq

if TYPE_CHECKING:
    from motor.motor_asyncio import AsyncIOMotorDatabase

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "Layout", "MongoStore"]

#: How appends are stored: ``"batch"`` (default) one document per ``append_entries`` call,
#: ``"entry"`` one document per entry (see the module doc for the measured trade). Loads read both.
Layout = Literal["batch", "entry"]

#: Largest ``encode_entry`` output accepted: 1 MiB below MongoDB's 16 MiB document limit, which
#: leaves room for the other fields of the entry document.
DEFAULT_MAX_ENTRY_BYTES = 15 * 1024 * 1024

#: Documents per cursor batch on load: one large batch (the server still caps a reply at 16 MiB)
#: instead of the default 101-document first batch and its extra round trips.
_LOAD_BATCH_SIZE = 100_000

_T = TypeVar("_T")


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a side task's outcome as retrieved (its error, if any, is reported elsewhere)."""
    if not task.cancelled():
        task.exception()


def _now_ms() -> datetime:
    """The current UTC time truncated to milliseconds, the precision of a BSON date.

    Truncating before storing means the ``SessionRecord`` returned by ``create_session`` equals
    the one ``load_session`` reads back later.
    """
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


class MongoStore:
    """A :class:`~durable_agent.session.Store` on MongoDB collections (SPEC §2.3).

    ``database`` is a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase``. The unique
    indexes are created on first use by each store object (or up front with
    :meth:`ensure_indexes`). Server-selection, connection and timeout errors raise
    ``StoreUnavailableError``; how long a call waits for a down server is the client's
    ``serverSelectionTimeoutMS`` (or ``timeoutMS``).

    A failed ``append_entries`` leaves nothing of its batch when it raises
    ``EntryConflictError`` (also after losing a race: the first writer wins), and at most a
    prefix of the batch otherwise, which a retry of the same batch completes (module doc).
    """

    def __init__(
        self,
        database: AsyncDatabase[Any] | AsyncIOMotorDatabase[Any],
        *,
        sessions_collection: str = "sessions",
        entries_collection: str = "entries",
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        layout: Layout = "batch",
    ) -> None:
        if isinstance(database, Database):
            raise TypeError(
                "MongoStore needs an async database: pymongo.AsyncMongoClient(...)[name] "
                "or a Motor AsyncIOMotorDatabase, not a synchronous pymongo Database"
            )
        if max_entry_bytes <= 0:
            raise ValueError("max_entry_bytes must be positive")
        if layout not in ("batch", "entry"):
            raise ValueError(f"layout must be 'batch' or 'entry', not {layout!r}")
        # Our own codec options, whatever the application configured on its client: plain dicts,
        # and aware UTC datetimes so created_at reads back equal to what was written.
        codec: CodecOptions[dict[str, Any]] = CodecOptions(
            document_class=dict, tz_aware=True, tzinfo=UTC
        )
        self._database = database
        self._sessions = database.get_collection(sessions_collection, codec_options=codec)
        self._entries = database.get_collection(entries_collection, codec_options=codec)
        self._layout = layout
        self._max_entry_bytes = max_entry_bytes
        self._indexed = False
        self._index_lock = asyncio.Lock()
        # Per session, one past the highest seq this object wrote or loaded (mongo_append).
        self._floors = SeqFloors()
        # Entry-ID claims and sequence slots of the batch layout (mongo_claims).
        claims = database.get_collection(f"{entries_collection}_claims", codec_options=codec)
        self._claims = Claims(claims, self._sessions)
        self._batches = BatchDocumentWriter(
            self._sessions, self._entries, self._floors, self._claims
        )
        self._writer: BatchWriter | BatchDocumentWriter = (
            self._batches
            if layout == "batch"
            else BatchWriter(self._sessions, self._entries, self._floors)
        )
        # Strong references to shielded writes so a cancelled caller's write is not collected.
        self._writes: set[asyncio.Future[Any]] = set()
        self._deltas = MongoDeltas(database)

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        return translate_errors(what, self._address)

    def _address(self) -> str:
        """The servers the client is configured for, as ``host:port`` (comma-separated)."""
        try:
            desc: Any = self._database.client.topology_description
            servers = (desc() if callable(desc) else desc).server_descriptions()
            return ",".join(f"{host}:{port}" for host, port in servers) or "?"
        except Exception:  # an address is only for the message; never mask the real error
            return "?"

    @property
    def database(self) -> AsyncDatabase[Any] | AsyncIOMotorDatabase[Any]:
        """The database this store was built on."""
        return self._database

    def live_deltas(self) -> MongoDeltas:
        """This store's live-delta channel: collection ``live_deltas`` of the same database."""
        return self._deltas

    async def ensure_indexes(self) -> None:
        """Create the three unique indexes if this store object has not done so yet.

        Concurrent first calls share one creation (the lock); ``create_index`` is idempotent on
        the server, so several store objects or processes may all call it. A failure leaves the
        flag unset and the next call tries again.
        """
        if self._indexed:
            return
        async with self._index_lock:
            if self._indexed:
                return
            with self._errors("creating indexes"):
                await self._entries.create_index(
                    [("session_id", ASCENDING), ("entry_id", ASCENDING)], unique=True
                )
                await self._entries.create_index(
                    [("session_id", ASCENDING), ("seq", ASCENDING)], unique=True
                )
                # Batch documents' keys; sparse: per-entry documents have none (mongo_batch).
                await self._entries.create_index("keys", unique=True, sparse=True)
            self._indexed = True

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Insert the session document; an existing ``_id`` raises ``SessionExistsError``."""
        sid = validate_session_id(session_id)
        # A fork source is a session ID and is validated like one; "" reads as no parent.
        parent = None if parent_id is None or parent_id == "" else validate_session_id(parent_id)
        created_at = _now_ms()
        doc: dict[str, Any] = {
            "_id": sid,
            "parent_id": parent,
            "created_at": created_at,
            "next_seq": 0,
        }
        if self._layout == "batch":
            doc["claims"] = CLAIMED  # every entry will have a claim (mongo_claims)
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            try:
                await self._complete(self._sessions.insert_one(doc))
            except DuplicateKeyError as exc:
                raise SessionExistsError(sid) from exc
        if self._layout == "batch":
            self._batches.created(sid)
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
            # The existence check goes out alongside the fetch (one round trip of latency, not
            # two); a missing session still raises, whatever the fetch found.
            check = asyncio.ensure_future(self._session_doc(sid))
            check.add_done_callback(_retrieve)
            try:
                cursor = self._entries.find(
                    {"session_id": sid}, LOAD_PROJECTION, batch_size=_LOAD_BATCH_SIZE
                ).sort("seq", ASCENDING)
                docs = [doc async for doc in cursor]
            except BaseException:
                check.cancel()
                raise
            session = await check
        end = end_seq(sid, docs)
        if docs:
            self._floors.raise_to(sid, end)
        if self._layout == "batch":
            self._batches.seen(sid, session, end)
        return decode_documents(sid, docs)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append ``entries`` in order, skipping identical stored IDs (SPEC §2.1 idempotency).

        Validation, encoding, the size limit and repeats within the batch are settled before the
        first write. There is no lookup before the insert: the insert's duplicate-key error *is*
        the idempotency check (see the module doc). The write section (reserve, insert, resolve a
        duplicate key, roll back a conflict) is shielded so a cancelled caller's write completes.
        """
        sid = validate_session_id(session_id)
        batch = encode_batch(sid, list(entries), limit=self._max_entry_bytes)
        todo = plan_append(sid, batch, lambda _: None)  # repeats within the batch only
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            if not todo:
                await self._require_session(sid)
                return
            await self._complete(self._writer.write(sid, todo))

    async def _require_session(self, sid: str) -> None:
        if await self._sessions.find_one({"_id": sid}, {"_id": 1}) is None:
            raise SessionNotFoundError(sid)

    async def _session_doc(self, sid: str) -> dict[str, Any]:
        """The session document's numbering fields (``next_seq``, ``claims``); it must exist."""
        doc: dict[str, Any] | None = await self._sessions.find_one(
            {"_id": sid}, {"next_seq": 1, "claims": 1}
        )
        if doc is None:
            raise SessionNotFoundError(sid)
        return doc

    async def _complete(self, write: Awaitable[_T]) -> _T:
        """Run a started write to completion even if the caller is cancelled (SPEC §2.1).

        The caller still sees ``CancelledError``; the write carries on in its own task, and its
        outcome is retrieved by a callback so a failure after cancellation is not reported as
        "never retrieved". A retry after it finished is a no-op by idempotency.
        """
        task = asyncio.ensure_future(write)
        self._writes.add(task)
        task.add_done_callback(self._write_done)
        return await asyncio.shield(task)

    def _write_done(self, task: asyncio.Future[Any]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()

    # -- retention (RetentionStore) -------------------------------------------------------------

    async def list_sessions(self, *, limit: int = 100, offset: int = 0) -> list[SessionRecord]:
        """One page of session records, newest ``created_at`` first, then by ID; reads the
        ``sessions`` collection only (never entries). A damaged session document is skipped."""
        from ..session.store import check_page

        check_page(limit, offset)
        projection = {"parent_id": 1, "created_at": 1}
        with self._errors("listing sessions"):
            cursor = (
                self._sessions.find({}, projection)
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
        """Delete the session document, then its entries; ``SessionNotFoundError`` if there is
        no such session. The document goes first: an append after it finds no session to reserve
        numbers on and raises ``SessionNotFoundError``."""
        sid = validate_session_id(session_id)
        with self._errors(f"session {sid!r}"):
            self._batches.forget(sid)
            deleted = await self._complete(self._sessions.delete_one({"_id": sid}))
            if deleted.deleted_count == 0:
                raise SessionNotFoundError(sid)
            await self._complete(self._entries.delete_many({"session_id": sid}))
            # Claims and slots last: an append racing the delete finds no session document.
            await self._complete(self._claims.delete_session(sid))
        self._floors.pop(sid, None)
