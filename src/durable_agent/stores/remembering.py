"""RememberingStore: a store wrapper that remembers the entries it saw stored, per session, so
a worker builds a run's path without loading the session (docs/design.md#worker-memory).

Every model call needs the path from the session's root to the run's leaf. Loading it means
reading and decoding the whole session, which made each turn slower than the last. But a worker
wrote most of those entries itself, moments before: the run's input and repairs, the model's
replies and the tool results. So the wrapper remembers every entry that went through it, and
:meth:`RememberingStore.path` answers from memory when the leaf's whole ancestry is remembered;
otherwise (another worker wrote part of it, or this one restarted) it loads the session once and
remembers what it read.

Why a remembered path is exact: stored entries never change (the log is append-only, the first
writer wins) and a path is fixed by its leaf's parent links. An entry is remembered only after the
store accepted it (an append returned) or returned it (a load), and as its stored encoding decodes,
so a path built here is the one a load would build. Deleting or creating a session through the
wrapper forgets what it held of that ID; an append racing either, and a load racing a delete, is
not remembered (an append to another session is).

Another process can delete a session and create it again around the wrapper. So what is
remembered of a session is labelled with the ``created_at`` of the session record it belongs to
(read before the load that filled it, or returned by the create), and ``path(..., confirm=True)``
(a run's start) reads the record once and uses memory only under the same label: a re-created
session is loaded, and a leaf of the deleted one is not found in it. Appends keep the label (the
store refuses an append continuing the deleted conversation into the newer session: its parent is
not there, docs/design.md#store-contract). A store that cannot delete sessions (no
``load_session``) has nothing to confirm.

Memory is bounded in bytes of encoded entries across sessions, and in sessions; the least
recently used sessions go first, and a session larger than the whole bound is not remembered
(its paths are always loaded). ``max_bytes=0`` remembers nothing.
"""

from __future__ import annotations

import inspect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry
from ..session.ids import validate_session_id
from ..session.store import RetentionStore, SeqStore, SessionRecord, Store, check_after
from ..session.store import last_entry as read_last_entry
from ..session.tree import path as tree_path

__all__ = ["DEFAULT_KNOWN_ENTRIES", "MAX_SESSIONS", "RememberingStore"]

DEFAULT_KNOWN_ENTRIES = 64 * 1024 * 1024
"""Bytes of encoded entries a worker remembers across sessions (``create_worker(known_entries=)``):
64 MiB holds about 100,000 chat-sized entries."""

MAX_SESSIONS = 1024
"""Sessions remembered at most, whatever their size."""


@dataclass
class _Session:
    """What is remembered of one session: its entries by ID, each with its encoded size, and
    the ``created_at`` of the session record they belong to (``None``: not known)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    born: datetime | None = None

    def add(self, entry: Entry, size: int) -> None:
        self.sizes[entry.id] = size  # first: a reader that finds the entry finds its size
        self.entries[entry.id] = entry
        self.bytes += size


def _size(wire: str) -> int:
    return len(wire.encode("utf-8"))


class RememberingStore:
    """A :class:`~durable_agent.session.Store` over ``store`` that remembers what it stores and
    loads (module doc). ``delete_session`` forgets the session; every other public attribute of
    ``store`` (``load_session``, ``list_sessions``, ``live_deltas``, ``root``…) passes through
    unchanged. Remembered entries are shared, not copied: treat what ``path`` returns as
    read-only."""

    def __init__(self, store: Store, *, max_bytes: int = DEFAULT_KNOWN_ENTRIES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        self.store = store
        self.max_bytes = max_bytes
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._held = 0
        self._deletes = 0
        """Deletes so far: an append or load that overlapped one is not remembered."""
        self._lock = threading.Lock()  # activities may run in threads (sync activity executors)
        self._pass_methods()

    def _pass_methods(self) -> None:
        """Set the store's other public methods on the wrapper itself. ``__getattr__`` passes
        them through, but ``isinstance`` against a runtime-checkable protocol looks attributes
        up statically on Python 3.12+ and never calls it: the wrapper of a store would be no
        :class:`~durable_agent.session.RetentionStore`, ``LiveStore`` or ``AppendFeed``, and a
        worker's run would not name its session's creation (docs/design.md#retention)."""
        for name in dir(self.store):
            if name.startswith("_") or name in vars(self) or hasattr(RememberingStore, name):
                continue
            if inspect.isroutine(inspect.getattr_static(self.store, name, None)):
                setattr(self, name, getattr(self.store, name))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.store, name)

    # -- the store protocol, remembering ----------------------------------------------------------

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        record = await self.store.create_session(session_id, parent_id)
        with self._lock:  # a new session: nothing remembered under its ID belongs to it
            self._drop(session_id)
            if self.max_bytes:
                self._sessions[session_id] = _Session(born=record.created_at)
                self._trim(session_id, self._sessions[session_id])
        return record

    async def load_entries(self, session_id: str) -> list[Entry]:
        """The store's load; remembered as the session's whole content, labelled with the
        session record read just before it (module doc)."""
        born = await self._born(session_id) if self.max_bytes else None
        return await self._load(session_id, born)

    async def _load(self, session_id: str, born: datetime | None) -> list[Entry]:
        deletes = self._deletes
        entries = await self.store.load_entries(session_id)
        if self.max_bytes:
            self._replace(session_id, entries, deletes, born)
        return entries

    async def _born(self, session_id: str) -> datetime | None:
        """The ``created_at`` of the session's record (``None`` for a store without records);
        ``SessionNotFoundError`` if there is none."""
        if not isinstance(self.store, RetentionStore):
            return None
        return (await self.store.load_session(session_id)).created_at

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        """The store's seq read (:class:`~durable_agent.session.SeqStore`), passed through and
        not remembered (a part of a log is no load); for a store without one, a whole load
        (remembered) from which the entries after ``after`` are taken, at most ``limit``."""
        if isinstance(self.store, SeqStore):
            return await self.store.load_entries_after(session_id, after, limit)
        after = check_after(after, limit)
        return list(enumerate(await self.load_entries(session_id), 1))[after:][:limit]

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None:
        """The store's last-entry read (:class:`~durable_agent.session.LastEntryStore`), passed
        through, or its seq read's last (:func:`~durable_agent.session.store.last_entry`)."""
        return await read_last_entry(self.store, session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        """The store's append; once it returns, the batch is remembered as a load returns it."""
        validate_session_id(session_id)  # before it is looked up here (an ID must be a str)
        with self._lock:
            deletes, held = self._deletes, self._sessions.get(session_id)
        await self.store.append_entries(session_id, entries)
        if self.max_bytes:
            self._add(session_id, entries, deletes, held)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """The store's guarded append (:class:`~durable_agent.session.GuardedStore`: a
        busy-checked run's input); remembered as :meth:`append_entries` is, once stored."""
        validate_session_id(session_id)
        guarded = getattr(self.store, "append_if_last", None)
        if guarded is None:  # unguarded, as the handle would do with the store itself
            await self.append_entries(session_id, entries)
            return True
        with self._lock:
            deletes, held = self._deletes, self._sessions.get(session_id)
        stored: bool = await guarded(session_id, entries, last_id)
        if stored and self.max_bytes:
            self._add(session_id, entries, deletes, held)
        return stored

    async def delete_session(self, session_id: str) -> None:
        """The store's delete; the session is forgotten whatever the outcome."""
        validate_session_id(session_id)  # before it is looked up here (an ID must be a str)
        if not isinstance(self.store, RetentionStore):
            raise TypeError(f"{type(self.store).__name__} cannot delete sessions")
        retention = self.store
        with self._lock:
            self._deletes += 1
            self._drop(session_id)
        try:
            await retention.delete_session(session_id)
        finally:
            with self._lock:
                self._deletes += 1
                self._drop(session_id)

    # -- paths -------------------------------------------------------------------------------------

    async def path(self, session_id: str, leaf_id: str, *, confirm: bool = False) -> list[Entry]:
        """Root-to-leaf path of ``leaf_id``: from memory when every entry from the leaf up to a
        root is remembered, else from one load. ``[]`` for ``""`` and for a leaf the session
        does not hold. ``confirm``: memory counts only if it belongs to the session the store
        holds now (one read of its record; ``SessionNotFoundError`` if there is none)."""
        validate_session_id(session_id)  # before it is looked up here, even for leaf ""
        # nothing remembered (max_bytes=0): the load below is the confirmation
        born = await self._born(session_id) if confirm and self.max_bytes else None
        if not leaf_id:
            return []
        with self._lock:
            known = self._sessions.get(session_id)
            if known is not None and (born is None or known.born == born):
                self._sessions.move_to_end(session_id)
                remembered = tree_path(known.entries, leaf_id)
                # complete when the walk reached a root; it stops early at an entry not
                # remembered (or at a parent cycle, which a load walks the same way)
                if remembered and remembered[0].parent_id is None:
                    return remembered
        if born is not None:  # the record just read labels the load that follows it
            return tree_path(await self._load(session_id, born), leaf_id)
        return tree_path(await self.load_entries(session_id), leaf_id)

    def remembered_bytes(self) -> int:
        """Encoded bytes of the entries remembered, across sessions."""
        return self._held

    # -- memory ------------------------------------------------------------------------------------

    def _add(
        self, session_id: str, entries: Sequence[Entry], deletes: int, held: _Session | None
    ) -> None:
        """Remember an append's batch, unless the session was deleted meanwhile, or created
        again through this wrapper (what the append wrote belongs to the one before)."""
        with self._lock:
            known = self._sessions.get(session_id)
            # first writer wins: an ID remembered already holds what is stored under it
            todo = [e for e in entries if known is None or e.id not in known.entries]
        fresh: list[tuple[Entry, int]] = []
        seen: set[str] = set()
        for entry in todo:  # encoded outside the lock
            if entry.id not in seen:  # a repeat within the batch was stored as the first
                seen.add(entry.id)
                wire = encode_entry(entry)
                fresh.append((decode_entry(wire), _size(wire)))
        with self._lock:
            if deletes != self._deletes or self._sessions.get(session_id) is not held:
                return
            known = self._sessions.setdefault(session_id, _Session())
            self._sessions.move_to_end(session_id)
            before = known.bytes
            for entry, size in fresh:
                if entry.id not in known.entries:
                    known.add(entry, size)
            self._held += known.bytes - before
            self._trim(session_id, known)

    def _replace(
        self, session_id: str, entries: list[Entry], deletes: int, born: datetime | None
    ) -> None:
        """Remember exactly what a whole-session load returned."""
        with self._lock:
            old = self._sessions.get(session_id)
        fresh = _Session(born=born)
        for entry in entries:
            if entry.id in fresh.entries:
                continue
            if old is not None and old.entries.get(entry.id) == entry:
                size = old.sizes[entry.id]  # equal entries encode equally: no encode needed
            else:
                size = _size(encode_entry(entry))
            fresh.add(entry, size)
            if fresh.bytes > self.max_bytes:
                break  # too large to remember: not worth measuring further
        with self._lock:
            if deletes != self._deletes:
                return
            self._drop(session_id)
            self._sessions[session_id] = fresh
            self._held += fresh.bytes
            self._trim(session_id, fresh)

    def _trim(self, grown: str, known: _Session) -> None:
        """After ``grown`` grew: drop it if it alone is over the bound, then the least recently
        used sessions until memory fits."""
        if known.bytes > self.max_bytes:
            self._drop(grown)
        while self._held > self.max_bytes or len(self._sessions) > MAX_SESSIONS:
            _, dropped = self._sessions.popitem(last=False)
            self._held -= dropped.bytes

    def _drop(self, session_id: str) -> None:
        dropped = self._sessions.pop(session_id, None)
        if dropped is not None:
            self._held -= dropped.bytes
