"""MemoryStore: sessions in process memory, for tests, demos and short-lived agents.

Two dicts (records, and per-session logs of ``(entry, wire)``) sit behind one lock. Every
operation validates the session ID first, then does all its work inside one critical section with
no ``await`` in it, so an append is atomic and a task cancelled before it runs has no effect.

The stored entry is decoded back from its wire form, so a load returns exactly what a durable store
would (``ephemeral`` reads false, an unregistered custom subclass reads as a bare ``CustomEntry``)
and no mutation of the caller's objects (a tool call's ``arguments`` dict), or of what a load
returned, can reach the log: every load decodes fresh copies from the stored wire strings.

Its live-delta channel (:class:`MemoryDeltas`) is a dict shared by everyone holding the store
object, so a worker and its clients in one process stream to each other
(docs/design.md#live-deltas).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ai.timefmt import utc_now
from ..session.appendplan import Guard, encode_batch, plan_append
from ..session.codec import bulk_decoding, decode_entry
from ..session.deltas import Cursor, Delta, DeltaKey
from ..session.entries import Entry
from ..session.errors import SessionExistsError, SessionNotFoundError
from ..session.ids import validate_session_id
from ..session.store import (
    DEFAULT_PAGE,
    Closing,
    SessionRecord,
    check_after,
    check_page,
    newest_first,
)
from .appends import AppendWatchers, Watch

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MemoryDeltas", "MemoryStore"]

DEFAULT_MAX_ENTRY_BYTES = 16 * 1024 * 1024
"""Largest accepted entry encoding, in UTF-8 bytes (the same default as FileStore)."""


def check_parent_id(parent_id: Any) -> str | None:
    """A fork source is a session ID: validate it like one; ``""`` reads as no parent."""
    if parent_id is None or parent_id == "":
        return None
    return validate_session_id(parent_id)


class MemoryDeltas:
    """Deltas in a dict: for a worker and its clients in one process (tests, MemoryStore).
    ``holds`` (the store's): whether a session exists; a reply's delta for one that does not
    (a run streaming after its session was deleted) is refused (docs/design.md#retention)."""

    def __init__(self, holds: Callable[[str], bool] | None = None) -> None:
        self._log: dict[DeltaKey, list[Delta]] = {}
        self._holds = holds

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        if key.turn and self._holds is not None and not self._holds(key.session_id):
            raise SessionNotFoundError(key.session_id)
        self._log.setdefault(key, []).append(delta)

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        deltas = [d for d in self._log.get(key, []) if (d.attempt, d.seq) > after]
        return sorted(deltas, key=lambda d: (d.attempt, d.seq))

    async def clear(self, key: DeltaKey) -> None:
        self._log.pop(key, None)

    def drop_session(self, session_id: str) -> None:
        """Every reply's deltas of a deleted session (docs/design.md#retention)."""
        validate_session_id(session_id)
        for key in [k for k in self._log if k.session_id == session_id]:
            self._log.pop(key, None)


@dataclass
class _Log:
    """One session's entries in append order, plus an ID index so idempotency checks are O(1)."""

    items: list[tuple[Entry, str]] = field(default_factory=list)
    wires: dict[str, str] = field(default_factory=dict)


class MemoryStore(Closing):
    """A :class:`~durable_agent.session.Store` that keeps everything in memory.

    The lock is a ``threading.Lock`` rather than an ``asyncio.Lock``: no critical section awaits,
    so it never blocks the loop for long, and it also keeps the store consistent when it is shared
    across event loops or threads (for example thread-pool activities).
    """

    def __init__(self, *, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        self._max_entry_bytes = max_entry_bytes
        self._lock = threading.Lock()
        self._records: dict[str, SessionRecord] = {}
        self._logs: dict[str, _Log] = {}
        self._deltas = MemoryDeltas(self._records.__contains__)
        self._watchers = AppendWatchers(live=True)

    def live_deltas(self) -> MemoryDeltas:
        """This store's live-delta channel (one per store object, in this process only)."""
        return self._deltas

    async def _release(self) -> None:
        """Let go of every session's entries (:class:`~durable_agent.session.store.Closing`)."""
        with self._lock:
            self._records.clear()
            self._logs.clear()
            self._deltas = MemoryDeltas()

    def watch_appends(self, session_id: str, wake: Callable[[], None]) -> Watch:
        """Call ``wake`` after each append to (or delete of) the session
        (:class:`~durable_agent.session.store.AppendFeed`; always live, in this process)."""
        return self._watchers.add(validate_session_id(session_id), wake, _live)

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        """Record the session; ``SessionExistsError`` if it is already there."""
        validate_session_id(session_id)
        parent = check_parent_id(parent_id)
        self._check_open()
        with self._lock:
            if session_id in self._records:
                raise SessionExistsError(session_id)
            record = SessionRecord(id=session_id, parent_id=parent, created_at=utc_now())
            self._records[session_id] = record
            self._logs[session_id] = _Log()
        return record

    async def load_session(self, session_id: str) -> SessionRecord:
        """The session's record; ``SessionNotFoundError`` if it was never created."""
        validate_session_id(session_id)
        self._check_open()
        with self._lock:
            record = self._records.get(session_id)
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    async def load_entries(self, session_id: str) -> list[Entry]:
        """The log in append order, as independent copies decoded from the stored wire form.

        Entries are frozen, but their content lists and argument dicts are not: sharing them
        would let a caller clearing ``loaded[0].message.content`` change every later load.
        """
        return [entry for _, entry in await self.load_entries_after(session_id, 0)]

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        """The entries after seq ``after`` (1-based positions in the log), each with its seq,
        at most ``limit`` (:class:`~durable_agent.session.SeqStore`): a slice of the log."""
        validate_session_id(session_id)
        check_after(after, limit)
        self._check_open()
        end = None if limit is None else after + limit
        with self._lock:
            wires = [wire for _, wire in self._log(session_id).items[after:end]]
        with bulk_decoding():
            return [(after + i, decode_entry(wire)) for i, wire in enumerate(wires, 1)]

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None:
        """The log's last entry and its seq (:class:`~durable_agent.session.LastEntryStore`)."""
        validate_session_id(session_id)
        self._check_open()
        with self._lock:
            items = self._log(session_id).items
            n, wire = len(items), items[-1][1] if items else ""
        return (n, decode_entry(wire)) if n else None

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Append in order, idempotent by ID; a conflict or an oversized entry writes nothing."""
        await self._append(session_id, entries, None)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """``append_entries`` only if the newest stored entry not of the batch is ``last_id``;
        else ``False``, nothing written (:class:`~durable_agent.session.GuardedStore`)."""
        return await self._append(session_id, entries, Guard(last_id))

    async def _append(self, session_id: str, entries: Sequence[Entry], guard: Guard | None) -> bool:
        validate_session_id(session_id)
        batch = encode_batch(session_id, entries, limit=self._max_entry_bytes)
        self._check_open()
        with self._lock:
            log = self._log(session_id)
            todo = plan_append(session_id, batch, log.wires.get, holds=log.wires.__contains__)
            stored = (entry.id for entry, _ in reversed(log.items))
            if guard is not None and not guard.holds(stored, batch):
                return False  # another append came after the entry the caller read
            log.items.extend((entry, wire) for entry, wire in todo)
            log.wires.update((entry.id, wire) for entry, wire in todo)
        if todo:
            self._watchers.notify(session_id)
        return True

    async def list_sessions(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0, prefix: str = ""
    ) -> list[SessionRecord]:
        """One page of records, newest first, of the IDs starting with ``prefix``
        (:class:`~durable_agent.session.RetentionStore`)."""
        prefix = check_page(limit, offset, prefix)
        self._check_open()
        with self._lock:
            records = [r for r in self._records.values() if r.id.startswith(prefix)]
        return newest_first(records)[offset : offset + limit]

    async def delete_session(self, session_id: str) -> None:
        """Remove the record, the log and the live deltas; ``SessionNotFoundError`` if there is
        no such session."""
        validate_session_id(session_id)
        self._check_open()
        with self._lock:
            if self._records.pop(session_id, None) is None:
                raise SessionNotFoundError(session_id)
            self._logs.pop(session_id, None)
            self._deltas.drop_session(session_id)
        self._watchers.notify(session_id)

    def _log(self, session_id: str) -> _Log:
        """The session's log (under the lock); ``SessionNotFoundError`` if there is none."""
        log = self._logs.get(session_id)
        if log is None:
            raise SessionNotFoundError(session_id)
        return log


async def _live() -> bool:
    return True
