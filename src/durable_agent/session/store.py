"""The Store protocol: the three operations the durable agent performs, nothing more; and
:class:`SessionRecord`, what ``create_session`` writes once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol, Self, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ..ai.timefmt import UtcDatetime
from .codec import encode_entry
from .entries import Entry
from .errors import SessionExistsError, SessionNotFoundError, StoreClosedError
from .ids import validate_session_id

__all__ = [
    "DEFAULT_PAGE",
    "AppendFeed",
    "AppendWatch",
    "Closing",
    "GuardedStore",
    "LastEntryStore",
    "RetentionStore",
    "SeqRead",
    "SeqStore",
    "SessionRecord",
    "Store",
    "check_after",
    "check_page",
    "copy_into_child",
    "created_at_of",
    "entries_after",
    "last_entry",
    "newest_first",
    "open_session",
    "seq_reader",
]

DEFAULT_PAGE = 100
"""How many records ``list_sessions`` returns when not told."""


class SessionRecord(BaseModel):
    """Exactly ``id``, ``parent_id`` (the fork source, or ``None``) and ``created_at``: a
    session's existence and lineage.

    It holds no application state: titles, modes and model choices live in the application's own
    storage, keyed by session ID.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    parent_id: str | None = None
    created_at: UtcDatetime


@runtime_checkable
class Store(Protocol):
    """Where sessions live. Implementations must follow docs/design.md#store-contract.

    - ``load_entries`` returns the log in append order; the last entry is the resume leaf.
    - ``append_entries`` is idempotent by entry ID: an identical re-append is skipped, a different
      one raises ``EntryConflictError`` and writes nothing of the batch.
    - A backend that is down raises ``StoreUnavailableError``; IDs are validated before any I/O.

    Closing is outside the protocol (a custom store need not have it): every built-in store is
    a :class:`Closing`, ``await store.aclose()`` or ``async with store:``.
    """

    async def create_session(
        self, session_id: str, parent_id: str | None = None
    ) -> SessionRecord: ...

    async def load_entries(self, session_id: str) -> list[Entry]: ...

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None: ...


@runtime_checkable
class RetentionStore(Store, Protocol):
    """A store that can also list and delete sessions (every built-in store: memory, file, mongo).

    Kept apart from :class:`Store` so the durable agent still needs only the three operations;
    operators and the CLI (``durable-agent sessions``, ``sessions rm``) need these.

    - ``list_sessions`` reads session *records* only (never entries), newest ``created_at``
      first, ties by ID, one page of at most ``limit`` records after skipping ``offset``; with
      ``prefix``, only the sessions whose ID starts with it (``limit`` and ``offset`` count
      those), found without reading the others' records where the backend allows: a tenant's
      listing costs what its own sessions cost (docs/design.md#retention). A prefix is made of
      session-ID characters (``InvalidSessionIdError``, before any I/O, for one that is not).
    - ``delete_session`` removes the session's entries and its record; ``SessionNotFoundError``
      if it does not exist. Forks of it keep their ``parent_id`` (a lineage note, not a link that
      must resolve). Later appends to it raise ``SessionNotFoundError``, so a run still holding
      the session fails with that typed error instead of writing into nothing; creating the ID
      again starts an empty session.
    """

    async def load_session(self, session_id: str) -> SessionRecord: ...

    async def list_sessions(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0, prefix: str = ""
    ) -> list[SessionRecord]: ...

    async def delete_session(self, session_id: str) -> None: ...


@runtime_checkable
class GuardedStore(Store, Protocol):
    """A store that appends only if nobody appended since the caller read (every built-in store):
    what keeps two processes that read one leaf from both storing under it
    (docs/design.md#store-contract).

    ``append_if_last(session_id, entries, last_id)`` is ``append_entries`` (same idempotency,
    conflicts and errors) on one condition, checked atomically against appends from any process:
    the newest stored entry that is not one of the batch's own is ``last_id`` (``None``: the
    session holds nothing but the batch's entries, a fork's copy). ``True`` when the batch is
    stored (a repeat of a stored batch too, while the condition holds); ``False`` when it does
    not hold, nothing of the batch written.
    """

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool: ...


@runtime_checkable
class SeqStore(Store, Protocol):
    """A store that reads a session from a sequence number on (every built-in store).

    An entry's **seq** is its 1-based position in its session's append order (the order
    ``load_entries`` returns); seqs never change and are never reused, so "the entries after
    seq N" is a resumable cursor: a run stream and the HTTP stream follow a session by it
    (docs/design.md#store-contract). ``load_entries_after(session_id, after, limit)`` returns
    the entries with seq > ``after``, each with its seq, in seq order, at most ``limit`` of them
    (``None``: all), reading only what follows ``after`` where the backend allows, and no more
    than the page asked for: a page of a long session of megabyte tool results must not cost a
    read of it all. ``after`` past the end gives ``[]``; a negative or non-integer ``after``, or
    a ``limit`` below 1, is a ``ValueError``; an unknown session ``SessionNotFoundError``.
    """

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]: ...


@runtime_checkable
class LastEntryStore(SeqStore, Protocol):
    """A seq store that reads a session's last entry alone (every built-in store): what a
    session's ``last_seq`` and leaf, or a stream "from now", costs (docs/design.md#store-contract).

    ``last_entry(session_id)`` is the entry ``load_entries_after(session_id, n - 1)`` would end
    with, ``(n, entry)``, reading neither the entries before it nor their bodies where the backend
    allows (``None``: the session holds none); errors as ``load_entries_after``'s. Apart from
    :class:`SeqStore` so a custom store with a seq read alone keeps it (:func:`last_entry`)."""

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None: ...


@runtime_checkable
class LastEntriesStore(LastEntryStore, Protocol):
    """A store that reads a session's last ``count`` entries at once (MongoStore: one read of
    its documents' outline, not one for the last seq and another for what follows it); others
    are read so by :func:`last_entries`."""

    async def last_entries(self, session_id: str, count: int) -> list[tuple[int, Entry]]: ...


class SeqRead(Protocol):
    """A seq read, as :func:`seq_reader` decides it: ``load_entries_after``'s arguments."""

    def __call__(
        self, session_id: str, after: int, limit: int | None = None
    ) -> Awaitable[list[tuple[int, Entry]]]: ...


class Closing:
    """Closing a built-in store, as ``httpx.AsyncClient`` closes (docs/design.md#store-contract):
    ``await store.aclose()``, or ``async with store:``, releases what the store object holds
    (:meth:`_release`: a MongoStore's client, a FileStore's open live-delta files); every call
    after it raises :class:`StoreClosedError`. Closing again does nothing."""

    _closed = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that overrides ``append_entries`` alone (to count, log or refuse writes)
        is a plain store: its guarded append would go around the override, so it is taken away
        and every write goes through ``append_entries``, unguarded, as a custom store's does.
        So is its last-entry read when it overrides ``load_entries_after`` alone: a last entry
        is then read through the override (:func:`last_entry`)."""
        super().__init_subclass__(**kwargs)
        if "append_entries" in vars(cls) and "append_if_last" not in vars(cls):
            cls.append_if_last = None  # type: ignore[attr-defined]  # fails GuardedStore checks
        if "load_entries_after" in vars(cls) and "last_entry" not in vars(cls):
            cls.last_entry = None  # type: ignore[attr-defined]  # read through the override
            cls.last_entries = None  # type: ignore[attr-defined]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True  # first: a call made while the release awaits is refused
            await self._release()

    async def _release(self) -> None:
        """What this kind of store releases (nothing by default)."""

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(type(self).__name__)


def seq_reader(store: Store) -> SeqRead:
    """How to read ``store`` after a seq, decided once (a protocol check is not free): its own
    seq read (:class:`SeqStore`), else a whole load sliced."""
    if isinstance(store, SeqStore):
        return store.load_entries_after

    async def sliced(
        session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        return list(enumerate(await store.load_entries(session_id), 1))[after:][:limit]

    return sliced


async def entries_after(
    store: Store, session_id: str, after: int, limit: int | None = None
) -> list[tuple[int, Entry]]:
    """The session's entries after seq ``after``, at most ``limit`` of them, with their seqs
    (:func:`seq_reader`)."""
    return await seq_reader(store)(session_id, after, limit)


async def last_entry(store: Store, session_id: str) -> tuple[int, Entry] | None:
    """The session's last entry with its seq (``None``: it holds none): the store's own read
    (:class:`LastEntryStore`), else its whole seq read (or load) ends with it."""
    if isinstance(store, LastEntryStore):
        return await store.last_entry(session_id)
    found = await entries_after(store, session_id, 0)
    return found[-1] if found else None


async def last_entries(store: Store, session_id: str, count: int) -> list[tuple[int, Entry]]:
    """The session's last ``count`` entries with their seqs, in order: the store's own read
    (:class:`LastEntriesStore`), else its last entry's seq, then the entries after ``count``
    fewer (a session growing meanwhile gives more)."""
    if isinstance(store, LastEntriesStore):
        return await store.last_entries(session_id, count)
    last = await last_entry(store, session_id)
    return [] if last is None else await entries_after(store, session_id, max(0, last[0] - count))


class AppendWatch(Protocol):
    """One reader's watch on one session's appends (:meth:`AppendFeed.watch_appends`)."""

    @property
    def live(self) -> bool:
        """The feed is up: each append committed from now on calls the watch's ``wake``."""
        ...

    async def ready(self) -> bool:
        """Wait until the feed knows whether it is up (its first try settled): :attr:`live`."""
        ...

    def close(self) -> None:
        """Stop calling ``wake``."""
        ...


@runtime_checkable
class AppendFeed(Protocol):
    """A store that tells its readers when a session's appends commit, so a follower waits for
    them instead of polling (docs/design.md#following-a-session): ``MemoryStore`` always,
    ``MongoStore`` where the server has change streams (a replica set). ``wake`` is called on
    the event loop that watched, soon after each append of ``session_id`` commits, and when
    the feed goes up or down (a read then finds what it may have missed). Best effort: a
    follower still reads now and then, and on its own schedule while the feed is down.
    """

    def watch_appends(self, session_id: str, wake: Callable[[], None]) -> AppendWatch: ...


def check_after(after: object, limit: object = None) -> int:
    """``load_entries_after``'s cursor: a non-negative integer, else ``ValueError``; and its
    ``limit``: ``None`` or a positive integer."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after must be a non-negative integer, not {after!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, not {limit!r}")
    return after


def check_page(limit: int, offset: int, prefix: str = "") -> str:
    """``list_sessions``' arguments: ``ValueError`` for a negative offset or a limit below 1,
    ``InvalidSessionIdError`` for a prefix that is not made of session-ID characters (as a
    tenant's, so it never reaches a regex or a file name unchecked); returns the prefix."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer, got {offset!r}")
    return validate_session_id(prefix) if prefix != "" else prefix


def newest_first(records: list[SessionRecord]) -> list[SessionRecord]:
    """Records in ``list_sessions`` order: newest ``created_at`` first, then by ID."""
    by_id = sorted(records, key=lambda r: r.id)
    return sorted(by_id, key=lambda r: r.created_at, reverse=True)


async def open_session(store: Store, session_id: str) -> list[Entry]:
    """Open-or-create (docs/design.md#handle-and-engine): the session's entries, creating it (empty)
    if unknown.

    A lost create race (``SessionExistsError``) loads again, so concurrent first opens succeed.
    """
    try:
        return await store.load_entries(session_id)
    except SessionNotFoundError:
        pass
    try:
        await store.create_session(session_id)
        return []
    except SessionExistsError:
        return await store.load_entries(session_id)


async def created_at_of(store: Store, session_id: str) -> datetime | None:
    """The ``created_at`` of the session's record, which names one creation of its ID: what
    tells a run of the session from one of a session deleted before it was created again under
    the ID (docs/design.md#retention). ``None``: no such session, or a store without records."""
    if not isinstance(store, RetentionStore):
        return None
    try:
        return (await store.load_session(session_id)).created_at
    except SessionNotFoundError:
        return None


async def copy_into_child(
    store: Store, child_id: str, source_id: str, copies: Sequence[Entry]
) -> int:
    """A fork's copy (docs/design.md#tree-and-views): create the child, or accept one an earlier
    fork of this source left holding a prefix of ``copies``, then append them; the number of
    entries it held before. A :class:`GuardedStore` (every built-in one) appends only while
    the child holds nothing else, atomically: of two forks of different paths into one
    child at once, the one that copies second is refused (``SessionExistsError``), nothing of
    it stored, as it would be one after the other."""
    try:
        await store.create_session(child_id, parent_id=source_id)
        held = 0
    except SessionExistsError:
        held = await _resumable(store, child_id, source_id, copies)
    if not copies:
        return held
    if not isinstance(store, GuardedStore):
        await store.append_entries(child_id, copies)
    elif not await store.append_if_last(child_id, copies, None):
        raise SessionExistsError(child_id, "another fork of a different path copied into it")
    return held


async def _resumable(store: Store, child_id: str, source_id: str, copies: Sequence[Entry]) -> int:
    """How many of ``copies`` the existing child holds; ``SessionExistsError`` unless it is a
    fork of ``source_id`` holding a prefix of them and nothing else."""
    load_session = getattr(store, "load_session", None)
    if load_session is None:
        # the three protocol verbs cannot tell a fork of this source from an unrelated session
        raise SessionExistsError(
            child_id,
            f"the store has no load_session, so it cannot be checked as a fork of {source_id!r}",
        )
    record = await load_session(child_id)
    if record.parent_id != source_id:
        raise SessionExistsError(child_id, f"it is not a fork of {source_id!r}")
    existing = await store.load_entries(child_id)
    expected = [encode_entry(c) for c in copies[: len(existing)]]
    if len(existing) > len(copies) or [encode_entry(e) for e in existing] != expected:
        raise SessionExistsError(child_id, "it has diverged from the fork source")
    return len(existing)
