"""The MongoStore of main at a0d23ef, copied verbatim (imports made absolute) so
``bench/mongo_bench.py --baseline`` can print before and after side by side in one run.

Original docstring follows.

MongoStore: sessions in MongoDB (or a wire-compatible server such as FerretDB), SPEC §2.3.

Two collections. ``sessions`` holds one document per session,
``{_id: session_id, parent_id, created_at, next_seq}``; ``entries`` holds one document per entry,
``{_id, session_id, entry_id, seq, type, created_at, wire}``, where ``wire`` is the exact
``encode_entry`` string. Keeping the entry as a string (not as a sub-document) gives a byte-exact
round trip and means keys such as ``$x`` or ``a.b`` inside an entry never become field names.
An entry's ``_id`` is ``"<session_id>/<entry_id>"`` (unambiguous: session IDs have no ``/``), so
the idempotency check is a primary-key lookup: FerretDB's SQLite backend pushes only ``_id``
equality down to SQL and scans the whole collection for any other filter.

Append order is ``seq``. An append reserves a block of numbers with one
``find_one_and_update({_id}, {$inc: {next_seq: n}})`` on the session document and then inserts
the entries with ``insert_many(ordered=True)``; unique indexes on ``(session_id, entry_id)`` and
``(session_id, seq)`` make the database the referee between concurrent writers, so no
multi-document transaction is needed (the store runs on a standalone ``mongod`` and on FerretDB).
A reservation that is never used leaves a gap in ``seq``, which is harmless.

**Servers whose ``$inc`` is not atomic.** FerretDB 1.x implements ``findAndModify`` and
``update`` as a read followed by a write with no transaction around them (FerretDB issues #2168,
#3040): concurrent increments are lost, two writers can be handed the same numbers, and the
counter can move backwards. Overlapping numbers are caught by the ``(session_id, seq)`` unique
index and retried above the collision. A counter that went backwards could still place a
writer's next entry *before* its previous one, so each store object also keeps a floor per
session, one past the highest ``seq`` it has written or loaded, and never uses a number below
it: a writer's appends get increasing numbers. On MongoDB the counter is always ahead of every
stored ``seq`` and the floor never changes anything.

The store accepts a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase``: it uses only
the coroutine methods the two share.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

try:
    from bson.codec_options import CodecOptions
    from pymongo import ASCENDING, ReturnDocument
    from pymongo.asynchronous.database import AsyncDatabase
    from pymongo.database import Database
    from pymongo.errors import (
        BulkWriteError,
        DuplicateKeyError,
        OperationFailure,
    )
except ImportError as _missing:  # the mongo extra is not installed: say which one to install
    raise ImportError(
        f"MongoStore needs PyMongo ({_missing}): pip install 'durable-agent[mongo]'",
        name=_missing.name,
    ) from None

from durable_agent.session.appendplan import encode_batch, plan_append
from durable_agent.session.codec import bulk_decoding, decode_entry
from durable_agent.session.entries import Entry
from durable_agent.session.errors import (
    CorruptSessionError,
    EntryDecodeError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from durable_agent.session.ids import validate_session_id
from durable_agent.session.record import SessionRecord
from durable_agent.stores.mongo_errors import translate_errors

if TYPE_CHECKING:
    from motor.motor_asyncio import AsyncIOMotorDatabase

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MongoStore"]

#: Largest ``encode_entry`` output accepted: 1 MiB below MongoDB's 16 MiB document limit, which
#: leaves room for the other fields of the entry document.
DEFAULT_MAX_ENTRY_BYTES = 15 * 1024 * 1024

_DUPLICATE_KEY = 11000
_TYPE_MISMATCH = 14  # e.g. $inc on a next_seq that is not a number

#: Rounds of "reserve, insert, lose a race" before an append gives up. Each lost round means
#: another writer stored entries, so this is only reached under pathological contention.
_MAX_WRITE_ROUNDS = 50

#: Batches up to this size check stored IDs with concurrent primary-key lookups; larger ones
#: (forks, imports) with one ``$in`` query.
_POINT_LOOKUP_LIMIT = 32

#: Sessions whose sequence floor a store object remembers (least recently used are dropped).
_FLOOR_CACHE_SIZE = 4096

#: Documents per cursor batch on load: one large batch (the server still caps a reply at 16 MiB)
#: instead of the default 101-document first batch and its extra round trips.
_LOAD_BATCH_SIZE = 100_000

_T = TypeVar("_T")


def _now_ms() -> datetime:
    """The current UTC time truncated to milliseconds, the precision of a BSON date.

    Truncating before storing means the ``SessionRecord`` returned by ``create_session`` equals
    the one ``load_session`` reads back later.
    """
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _entry_key(session_id: str, entry_id: str) -> str:
    """An entry document's ``_id``: unique per session and entry, found by primary-key lookup."""
    return f"{session_id}/{entry_id}"


def _only_duplicate_keys(exc: BulkWriteError) -> bool:
    """True if every error in a bulk insert is a duplicate key (a concurrent writer's entry)."""
    details = exc.details
    errors = details.get("writeErrors") or []
    return (
        bool(errors)
        and not details.get("writeConcernErrors")
        and all(err.get("code") == _DUPLICATE_KEY for err in errors)
    )


class MongoStore:
    """A :class:`~durable_agent.session.Store` on MongoDB collections (SPEC §2.3).

    ``database`` is a PyMongo ``AsyncDatabase`` or a Motor ``AsyncIOMotorDatabase``. The unique
    indexes are created on first use by each store object (or up front with
    :meth:`ensure_indexes`). Server-selection, connection and timeout errors raise
    ``StoreUnavailableError``; how long a call waits for a down server is the client's
    ``serverSelectionTimeoutMS`` (or ``timeoutMS``).
    """

    def __init__(
        self,
        database: AsyncDatabase[Any] | AsyncIOMotorDatabase[Any],
        *,
        sessions_collection: str = "sessions",
        entries_collection: str = "entries",
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
    ) -> None:
        if isinstance(database, Database):
            raise TypeError(
                "MongoStore needs an async database: pymongo.AsyncMongoClient(...)[name] "
                "or a Motor AsyncIOMotorDatabase, not a synchronous pymongo Database"
            )
        if max_entry_bytes <= 0:
            raise ValueError("max_entry_bytes must be positive")
        # Our own codec options, whatever the application configured on its client: plain dicts,
        # and aware UTC datetimes so created_at reads back equal to what was written.
        codec: CodecOptions[dict[str, Any]] = CodecOptions(
            document_class=dict, tz_aware=True, tzinfo=UTC
        )
        self._database = database
        self._sessions = database.get_collection(sessions_collection, codec_options=codec)
        self._entries = database.get_collection(entries_collection, codec_options=codec)
        self._max_entry_bytes = max_entry_bytes
        self._indexed = False
        self._index_lock = asyncio.Lock()
        # Per session, one past the highest seq this object wrote or loaded (see module doc).
        self._floors: OrderedDict[str, int] = OrderedDict()
        # Strong references to shielded writes so a cancelled caller's write is not collected.
        self._writes: set[asyncio.Future[Any]] = set()

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

    async def ensure_indexes(self) -> None:
        """Create the two unique indexes if this store object has not done so yet.

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
            self._indexed = True

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Insert the session document; an existing ``_id`` raises ``SessionExistsError``."""
        sid = validate_session_id(session_id)
        # A fork source is a session ID and is validated like one; "" reads as no parent.
        parent = None if parent_id is None or parent_id == "" else validate_session_id(parent_id)
        created_at = _now_ms()
        doc = {"_id": sid, "parent_id": parent, "created_at": created_at, "next_seq": 0}
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            try:
                await self._complete(self._sessions.insert_one(doc))
            except DuplicateKeyError as exc:
                raise SessionExistsError(sid) from exc
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
            await self._require_session(sid)
            cursor = self._entries.find(
                {"session_id": sid},
                {"_id": 0, "entry_id": 1, "seq": 1, "wire": 1},
                batch_size=_LOAD_BATCH_SIZE,
            ).sort("seq", ASCENDING)
            docs = [doc async for doc in cursor]
        for doc in docs:
            seq = doc.get("seq")
            if not isinstance(seq, int) or isinstance(seq, bool):
                raise CorruptSessionError(
                    sid, f"decode entry {doc.get('entry_id')!r}: seq is {seq!r}, not an integer"
                )
        if docs:
            self._raise_floor(sid, int(docs[-1]["seq"]) + 1)
        out: list[Entry] = []
        with bulk_decoding():
            for doc in docs:
                wire = doc.get("wire")
                if not isinstance(wire, str):
                    raise CorruptSessionError(
                        sid, f"decode entry {doc.get('entry_id')!r}: no wire string"
                    )
                try:
                    out.append(decode_entry(wire))
                except EntryDecodeError as exc:
                    raise CorruptSessionError(
                        sid, f"decode entry {doc.get('entry_id')!r}: {exc}"
                    ) from exc
        return out

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append ``entries`` in order, skipping identical stored IDs (SPEC §2.1 idempotency).

        Everything that can refuse the batch happens before the first write: ID validation,
        encoding and the size limit, the conflict check against stored IDs. The write section
        (reserve, insert, resolve a race) is shielded so a cancelled caller's write completes.
        """
        sid = validate_session_id(session_id)
        batch = encode_batch(sid, list(entries), limit=self._max_entry_bytes)
        with self._errors(f"session {sid!r}"):
            await self.ensure_indexes()
            if not batch:
                await self._require_session(sid)
                return
            if len(batch) == 1:
                # One entry: the insert's duplicate-key check is the idempotency check (a
                # conflict cannot leave part of a one-entry batch written), saving a round trip
                # on the most common append. A retried identical entry costs one unused seq.
                todo = batch
            else:
                stored = await self._stored(sid, [entry.id for entry, _ in batch])
                todo = plan_append(sid, batch, stored.get)
            if todo:
                await self._complete(self._write(sid, todo))

    async def _require_session(self, sid: str) -> None:
        if await self._sessions.find_one({"_id": sid}, {"_id": 1}) is None:
            raise SessionNotFoundError(sid)

    async def _stored(self, sid: str, entry_ids: list[str]) -> dict[str, str]:
        """The stored encodings of those of ``entry_ids`` already in the session, by ``_id``."""
        keys = [_entry_key(sid, eid) for eid in dict.fromkeys(entry_ids)]
        projection = {"_id": 0, "entry_id": 1, "wire": 1}
        if len(keys) <= _POINT_LOOKUP_LIMIT:
            found = await asyncio.gather(
                *(self._entries.find_one({"_id": key}, projection) for key in keys)
            )
            return {doc["entry_id"]: doc["wire"] for doc in found if doc is not None}
        cursor = self._entries.find({"_id": {"$in": keys}}, projection)
        return {doc["entry_id"]: doc["wire"] async for doc in cursor}

    async def _stored_by_index(self, sid: str, entry_ids: list[str]) -> dict[str, str]:
        """Like :meth:`_stored`, through the ``(session_id, entry_id)`` unique index.

        Used after a duplicate-key error: the index is what rejected the insert, so it is the
        authority (it also finds entries that other programs stored under another ``_id``).
        """
        cursor = self._entries.find(
            {"session_id": sid, "entry_id": {"$in": list(dict.fromkeys(entry_ids))}},
            {"_id": 0, "entry_id": 1, "wire": 1},
        )
        return {doc["entry_id"]: doc["wire"] async for doc in cursor}

    def _raise_floor(self, sid: str, floor: int) -> None:
        self._floors[sid] = max(floor, self._floors.get(sid, 0))
        self._floors.move_to_end(sid)
        while len(self._floors) > _FLOOR_CACHE_SIZE:
            self._floors.popitem(last=False)

    async def _write(self, sid: str, todo: list[tuple[Entry, str]]) -> None:
        """Reserve ``len(todo)`` sequence numbers and insert; resolve duplicate keys from a race.

        A duplicate key means a concurrent writer got there first. On ``(session_id, entry_id)``
        it stored that ID after our check (typically a retry of the same batch); on
        ``(session_id, seq)`` it was handed overlapping numbers by a non-atomic counter. An
        ordered insert stops at the first error, so the entries before it are ours and stored. We
        re-read the batch's IDs and re-plan: identical content is skipped, different content
        raises ``EntryConflictError`` (in that race, entries of this batch before the conflicting
        one stay written: there is no transaction to undo them), and whatever is still missing
        gets fresh numbers above the collision.
        """
        for _ in range(_MAX_WRITE_ROUNDS):
            try:
                reserved = await self._sessions.find_one_and_update(
                    {"_id": sid},
                    {"$inc": {"next_seq": len(todo)}},
                    return_document=ReturnDocument.BEFORE,
                )
            except OperationFailure as exc:
                if exc.code != _TYPE_MISMATCH:
                    raise
                raise CorruptSessionError(sid, f"bad session document: {exc}") from exc
            if reserved is None:
                raise SessionNotFoundError(sid)
            first = max(int(reserved.get("next_seq", 0)), self._floors.get(sid, 0))
            # Claim the block locally at once, so concurrent appends through this object never
            # pick overlapping numbers even when the server's counter lost an increment.
            self._raise_floor(sid, first + len(todo))
            docs = [
                {
                    "_id": _entry_key(sid, entry.id),
                    "session_id": sid,
                    "entry_id": entry.id,
                    "seq": first + offset,
                    "type": entry.type,
                    "created_at": entry.created_at,
                    "wire": wire,
                }
                for offset, (entry, wire) in enumerate(todo)
            ]
            try:
                await self._entries.insert_many(docs, ordered=True)
            except BulkWriteError as exc:
                if not _only_duplicate_keys(exc):
                    raise
                race = exc
            else:
                return
            todo_ids = [entry.id for entry, _ in todo]
            remaining = plan_append(sid, todo, (await self._stored(sid, todo_ids)).get)
            if len(remaining) == len(todo):
                # Nothing went in and no ID of ours is stored under its usual _id: the numbers
                # collided (the next round takes new ones), or another program stored one of the
                # IDs under a different _id, which only the (session_id, entry_id) index finds.
                stored = await self._stored_by_index(sid, todo_ids)
                remaining = plan_append(sid, todo, stored.get)
            todo = remaining
            if not todo:
                return
        raise StoreUnavailableError(
            f"session {sid!r}: append kept colliding with concurrent writers "
            f"({_MAX_WRITE_ROUNDS} rounds)"
        ) from race

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
