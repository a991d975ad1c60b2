"""The entries a worker knows are stored, per session, so a model call need not reload the log.

Every model call needs the path from the session's root to the run's leaf. Reading it from the
store means loading and decoding the whole session, which made each turn slower than the last
(a turn's store read grew with the conversation). But a worker wrote most of those entries
itself, moments before: the run's input and repairs (``append_entries``), the model's replies
and the tool results (committed under their stamps). So each worker remembers, per session,
every entry it stored or loaded, and builds a path from them when the leaf's whole ancestry is
known; otherwise (another worker wrote part of it, or the worker restarted) it loads the session
and remembers what it read.

Why a remembered path is exact: stored entries never change (the log is append-only, first
writer wins) and a path is fixed by its leaf's parent links. An entry is remembered only after
the store accepted it (or returned it), and as its stored encoding decodes, so a path built here
is the one a load would build. Bounded by sessions and by entries held in total; least recently
used sessions go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from ..session.entries import Entry

__all__ = ["DEFAULT_KNOWN_ENTRIES", "KnownEntries"]

DEFAULT_KNOWN_ENTRIES = 20_000
"""Entries a worker remembers in total across sessions (tens of MB for chat-sized entries); a
session longer than this is loaded in every model call, as is any session when it is 0."""

_MAX_SESSIONS = 1024


class KnownEntries:
    """Per session: entry ID -> stored entry, for the entries this worker stored or loaded."""

    def __init__(self, max_entries: int = DEFAULT_KNOWN_ENTRIES) -> None:
        self._max_entries = max_entries
        self._sessions: OrderedDict[str, dict[str, Entry]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()  # activities may run in threads (sync activity executors)

    def path(self, session_id: str, leaf_id: str) -> list[Entry] | None:
        """Root-to-leaf path of ``leaf_id`` (``[]`` for ``""``), or ``None`` if an entry on it
        is not known here."""
        if not leaf_id:
            return []
        with self._lock:
            known = self._sessions.get(session_id)
            if known is None:
                return None
            self._sessions.move_to_end(session_id)
            out: list[Entry] = []
            at: str | None = leaf_id
            while at is not None:
                entry = known.get(at)
                if entry is None or len(out) > len(known):  # missing, or a cycle (corrupt)
                    return None
                out.append(entry)
                at = entry.parent_id
        out.reverse()
        return out

    def add(self, session_id: str, entries: Iterable[Entry]) -> None:
        """Remember entries the store now holds (accepted by an append, or returned by it)."""
        with self._lock:
            known = self._sessions.setdefault(session_id, {})
            self._sessions.move_to_end(session_id)
            for entry in entries:
                if entry.id not in known:  # first writer wins: a stored entry never changes
                    known[entry.id] = entry
                    self._held += 1
            self._trim()

    def replace(self, session_id: str, entries: list[Entry]) -> None:
        """Remember exactly what a whole-session load returned."""
        with self._lock:
            old = self._sessions.pop(session_id, None)
            if old is not None:
                self._held -= len(old)
            if len(entries) > self._max_entries:
                return
            self._sessions[session_id] = {e.id: e for e in entries}
            self._held += len(self._sessions[session_id])
            self._trim()

    def forget(self, session_id: str) -> None:
        with self._lock:
            old = self._sessions.pop(session_id, None)
            if old is not None:
                self._held -= len(old)

    def _trim(self) -> None:
        while self._sessions and (
            self._held > self._max_entries or len(self._sessions) > _MAX_SESSIONS
        ):
            _, dropped = self._sessions.popitem(last=False)
            self._held -= len(dropped)
