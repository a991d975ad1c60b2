"""What MongoStore makes of the server's answers (docs/design.md#mongo-store).

**Stored documents into entries.** A session's batch documents (one per append, written by
:mod:`~durable_agent.stores.mongo.writer`) come back from one ``find`` sorted by incarnation and
``seq``; only those of the session document's incarnation are read (:func:`of_incarnation`:
nothing of a deleted session under the same ID, no fences). A document's entries sit at
``seq .. seq + len - 1``, so that order is the append order. The store is trusted but may be
corrupted: a document of the wrong shape, a ``seq`` that is not an integer, or an entry that does
not decode raises ``CorruptSessionError`` naming the document's first entry. An entry ID that
appears twice (the writers never store one twice; a hand-edited or foreign document could) is
returned once if the copies are identical, and raises ``CorruptSessionError`` if they differ.

**Driver errors into typed errors.** A backend that is down or too slow raises
``StoreUnavailableError`` with a one-line message (:func:`translate_errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    InvalidOperation,
    OperationFailure,
    PyMongoError,
    WTimeoutError,
)

from ...session.codec import bulk_decoding, decode_entry
from ...session.entries import Entry
from ...session.errors import (
    CorruptSessionError,
    EntryDecodeError,
    StoreClosedError,
    StoreUnavailableError,
)
from .incarnation import Scope

__all__ = [
    "LOAD_BATCH_SIZE",
    "LOAD_PROJECTION",
    "OUTLINE_PROJECTION",
    "decode_documents",
    "end_seq",
    "now_ms",
    "of_incarnation",
    "retrieve",
    "seq_of",
    "slot_of",
    "stored_entries",
    "strings",
    "translate_errors",
]

#: Documents per cursor batch on load: one large batch (the server still caps a reply at 16 MiB)
#: instead of the default 101-document first batch and its extra round trips.
LOAD_BATCH_SIZE = 100_000

#: The fields a load reads.
LOAD_PROJECTION = {"_id": 0, "inc": 1, "fence": 1, "entry_id": 1, "seq": 1, "slot": 1, "wires": 1}

#: The fields a read after a sequence number first reads of every document.
OUTLINE_PROJECTION = {"inc": 1, "fence": 1, "seq": 1, "slot": 1, "keys": 1}


def of_incarnation(
    docs: list[dict[str, Any]], inc: str, *, fences: bool = False
) -> list[dict[str, Any]]:
    """The documents of incarnation ``inc`` (module doc): its batch documents, and its fences
    too if ``fences``."""
    return [doc for doc in docs if doc.get("inc") == inc and (fences or not doc.get("fence"))]


def slot_of(doc: dict[str, Any]) -> tuple[int, int] | None:
    """The slot ``(seq, n)`` a document of a split batch names; ``None`` for any other."""
    slot = doc.get("slot")
    if (
        isinstance(slot, list)
        and len(slot) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in slot)
        and slot[1] > 0
    ):
        return slot[0], slot[1]
    return None


def seq_of(sid: str, doc: dict[str, Any]) -> int:
    """A stored document's ``seq``; one that is not an integer is damage."""
    seq = doc.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise CorruptSessionError(
            sid, f"decode entry {doc.get('entry_id')!r}: seq is {seq!r}, not an integer"
        )
    return seq


def strings(sid: str, doc: dict[str, Any], field: str) -> list[str]:
    """A document's ``wires`` or ``keys``, checked to be a list of strings."""
    values = doc.get(field)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        name = doc.get("entry_id", doc.get("_id"))
        raise CorruptSessionError(sid, f"decode batch at {name!r}: {field} is not a string list")
    return values


def end_seq(sid: str, docs: list[dict[str, Any]], field: str = "wires") -> int:
    """One past the highest ``seq`` the documents use (their ``field`` lists count the
    entries); 0 for none. Checks every ``seq`` first, so a bad one raises before anything is
    decoded."""
    end = 0
    for doc in docs:
        seq = seq_of(sid, doc)
        values = doc.get(field)
        slot = slot_of(doc)
        end = max(end, seq + (len(values) if isinstance(values, list) else 1))
        end = end if slot is None else max(end, slot[0] + slot[1])
    return end


def decode_documents(
    sid: str, docs: list[dict[str, Any]], skip: int = 0, limit: int | None = None
) -> list[Entry]:
    """Every entry of ``docs`` (sorted by ``seq``), decoded, in order (module doc); ``skip``
    leaves out the first entries of the first document, ``limit`` those past that many (the
    last document of a page may hold more than it)."""
    out: list[Entry] = []
    seen: dict[str, str] = {}
    with bulk_decoding():
        for n, doc in enumerate(docs):
            for wire in strings(sid, doc, "wires")[skip if n == 0 else 0 :]:
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
                if len(out) == limit:
                    return out
    return out


def stored_entries(scope: Scope, doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(entry_id, wire)`` of every entry of a stored document (read by ``_id`` to check what
    an append would store twice; a fence holds none); a wire is compared, not decoded, so it is
    not checked here."""
    if doc.get("fence"):
        return []
    keys, wires = doc.get("keys"), doc.get("wires")
    ids = [scope.entry_id(k) if isinstance(k, str) else None for k in keys or ()]
    if (
        not isinstance(keys, list)
        or not isinstance(wires, list)
        or len(keys) != len(wires)
        or None in ids
    ):
        raise CorruptSessionError(scope.sid, f"bad batch document {doc.get('_id')!r}: keys/wires")
    return [(eid, wire) for eid, wire in zip(ids, wires, strict=True) if eid is not None]


# -- driver errors --------------------------------------------------------------------------------

#: Server error codes that mean "the server is going away or not reachable right now", not "your
#: request is wrong": shutdown, step-down, network and time-limit failures reported by the server.
_UNAVAILABLE_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        50,  # MaxTimeMSExpired
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)


def _is_unavailable(exc: PyMongoError) -> bool:
    """Whether ``exc`` means the backend is down or too slow, as opposed to a bad request.

    Covers server selection, connection and network errors (``ConnectionFailure`` and its
    subclasses ``AutoReconnect``, ``NetworkTimeout``, ``ServerSelectionTimeoutError``,
    ``WaitQueueTimeoutError``), server-side time limits, write-concern timeouts, client-side
    operation timeouts (``exc.timeout``) and shutdown/step-down codes.
    """
    if isinstance(exc, ConnectionFailure | ExecutionTimeout | WTimeoutError):
        return True
    if exc.timeout:
        return True
    if not isinstance(exc, OperationFailure):
        return False
    return exc.code in _UNAVAILABLE_CODES or _cancelled_at_shutdown(exc)


def _cancelled_at_shutdown(exc: OperationFailure) -> bool:
    """FerretDB's reply to a request in flight as it stops: InternalError "context canceled"
    (its transaction rolled back), where MongoDB replies InterruptedAtShutdown."""
    return exc.code == 1 and str((exc.details or {}).get("errmsg", "")).endswith("context canceled")


def _short_reason(exc: BaseException) -> str:
    """The first clause of a driver error, without pymongo's topology dump."""
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    for cut in (" (configured timeouts", ", Timeout:", ", Topology Description"):
        text = text.split(cut, 1)[0]
    if ": " in text and text.split(": ", 1)[0].count(":") == 1:  # drop a "host:port: " prefix
        text = text.split(": ", 1)[1]
    return text[:160] or type(exc).__name__


def servers_of(database: Any) -> str:
    """The servers ``database``'s client is configured for, as ``host:port`` (comma-separated),
    for an error message."""
    try:
        desc: Any = database.client.topology_description
        servers = (desc() if callable(desc) else desc).server_descriptions()
        return ",".join(f"{host}:{port}" for host, port in servers) or "?"
    except Exception:  # an address is only for the message; never mask the real error
        return "?"


@contextlib.contextmanager
def translate_errors(what: str, address: Callable[[], str]) -> Iterator[None]:
    """Raise ``StoreUnavailableError`` (chained) for a backend that is down; pass the rest on.

    The message is one line, ``cannot reach MongoDB at host:port (reason) [what]``; ``what``
    names the object of the call, e.g. ``session 's1'``.
    """
    try:
        yield
    except InvalidOperation as exc:  # PyMongo's (and Motor's) "Cannot use ... after close"
        if "after close" not in str(exc):
            raise
        raise StoreClosedError("MongoStore", "its client was closed") from exc
    except PyMongoError as exc:
        if _is_unavailable(exc):
            raise StoreUnavailableError(
                f"cannot reach MongoDB at {address()} ({_short_reason(exc)}) [{what}]"
            ) from exc
        raise
    except OSError as exc:
        raise StoreUnavailableError(
            f"cannot reach MongoDB at {address()} ({_short_reason(exc)}) [{what}]"
        ) from exc


# -- store helpers ---------------------------------------------------------------------------------


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a side task's outcome as retrieved (its error, if any, is reported elsewhere)."""
    if not task.cancelled():
        task.exception()


_T = TypeVar("_T")


class StartedWrites(set[asyncio.Future[Any]]):
    """A store object's writes in progress, held strongly so none is collected: a started
    write completes (docs/design.md#store-contract)."""

    async def complete(self, write: Awaitable[_T]) -> _T:
        """Run ``write`` to completion even if the caller is cancelled. The caller still sees
        ``CancelledError``; the write carries on in its own task, and its outcome is retrieved
        so a failure after cancellation is not reported as "never retrieved". A retry after it
        finished is a no-op by idempotency."""
        task = asyncio.ensure_future(write)
        self.add(task)
        task.add_done_callback(self._done)
        return await asyncio.shield(task)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self.discard(task)
        retrieve(task)


def now_ms() -> datetime:
    """The current UTC time truncated to milliseconds, the precision of a BSON date, so the
    record ``create_session`` returns equals the one ``load_session`` reads back later."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)
