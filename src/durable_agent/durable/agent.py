"""The durable agent handle: open or create a session, run, append, branch, fork, compact.

A handle holds the session's log (append order, ephemeral included), an index of stored entries
by ID, and the **leaf** where the next entry attaches. Edit, retry and rewind are all ``branch``:
moving the leaf. Everything a handle records goes through one persist algorithm
(:mod:`.persist`) under its lock; lifecycle events are published after the lock is released.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from ..agent.loop import Factory
from ..agent.options import AgentOptions
from ..ai.messages import Message
from ..ai.timefmt import utc_now
from ..session.codec import encode_entry
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.errors import SessionExistsError, SessionNotFoundError
from ..session.ids import new_id, validate_session_id
from ..session.repair import repair_tool_calls
from ..session.store import Store
from ..session.tree import path as tree_path
from ..session.views import raw_model_view, transcript_view
from .errors import AgentClosedError, EntryNotFoundError, RunActiveError
from .events import Event
from .executor import Executor, LocalExecutor
from .inputs import EntryLike, as_entry
from .persist import Stamped, is_durable, stamp
from .publisher import PublisherLike, branched_key, fork_init_key, forked_key, init_key
from .stream import RunStream

__all__ = ["Agent", "Middleware", "Runner", "fork_entry_id", "new"]

Runner = Callable[[list[Entry]], Awaitable[RunStream]]
"""Starts a run from its input entries."""
Middleware = Callable[[Runner], Runner]
"""Wraps the next runner; applied once per handle, first listed outermost."""


def fork_entry_id(child_session_id: str, source_entry_id: str) -> str:
    """The derived ID of a fork copy: stable, so a retried fork finds its own copies."""
    digest = hashlib.sha256(f"{child_session_id}\n{source_entry_id}".encode()).hexdigest()
    return digest[:16]


class Agent:
    """A live handle on one session. Create it with :func:`new`; it belongs to one event loop."""

    def __init__(
        self,
        *,
        session_id: str,
        store: Store,
        factory: Factory | None,
        options: AgentOptions,
        raw_options: dict[str, Any],
        publisher: PublisherLike | None,
        middleware: Sequence[Middleware],
        executor: Executor,
        entries: Sequence[Entry],
    ) -> None:
        self._session_id = session_id
        self._store = store
        self._factory = factory
        self._options = options
        self._raw_options = raw_options
        self._publisher = publisher
        self._middleware = tuple(middleware)
        self._executor = executor
        self._log: list[Entry] = list(entries)
        self._index: dict[str, Entry] = {e.id: e for e in entries}
        self._leaf = entries[-1].id if entries else ""
        self._lock = asyncio.Lock()
        self._running = False
        self._compacting = False
        self._closed = False
        self._pending_run_id: str | None = None
        self._active_cache: _ActivePath | None = None
        runner: Runner = self._base_run
        for mw in reversed(self._middleware):
            runner = mw(runner)
        self._runner = runner

    # -- reads -------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def leaf_id(self) -> str:
        """Where the next entry attaches; ``""`` before the first entry."""
        return self._leaf

    @property
    def store(self) -> Store:
        return self._store

    @property
    def running(self) -> bool:
        return self._running

    @property
    def closed(self) -> bool:
        return self._closed

    def entries(self) -> list[Entry]:
        """The log in append order, ephemeral entries included (a copy)."""
        return list(self._log)

    def transcript(self) -> list[Entry]:
        """The active path as a person reads it (no meta or ephemeral messages)."""
        return transcript_view(self._path())

    def messages(self) -> list[Message]:
        """The active path as the model sees it (compaction applied, tool calls repaired)."""
        return self._active().views()[1]

    def _active(self) -> _ActivePath:
        active = self._active_cache
        if active is None or active.leaf != self._leaf:
            active = _ActivePath(self._leaf, tree_path(self._index, self._leaf))
            self._active_cache = active
        return active

    def _path(self) -> list[Entry]:
        """The active path (a new list)."""
        return list(self._active().path)

    def _views(self) -> tuple[list[Message], list[Message]]:
        """``raw_model_view`` and ``model_view`` of the active path (new lists)."""
        return self._active().views()

    # -- guards and state (used by executors) -------------------------------------------------

    def _check_mutable(self) -> None:
        if self._closed:
            raise AgentClosedError(f"agent for session {self._session_id!r} is closed")
        if self._running or self._compacting:
            raise RunActiveError(f"a run or compaction is active on session {self._session_id!r}")

    def _apply(self, stamped: Stamped) -> None:
        old_leaf = self._leaf
        self._log.extend(stamped.copies)
        for entry in stamped.durable:
            self._index[entry.id] = entry
        self._leaf = stamped.leaf_id
        active = self._active_cache
        durable = stamped.durable
        if (
            active is not None
            and durable
            and active.leaf == old_leaf
            and durable[0].parent_id == (old_leaf or None)
        ):
            active.extend(stamped.leaf_id, durable)  # stamp() chains the durable copies

    def _apply_receipt(self, entries: Sequence[Entry], leaf_id: str) -> None:
        """Follow a remote run's receipt (Temporal executor)."""
        for entry in entries:
            if entry.id not in self._index:
                self._log.append(entry)
                self._index[entry.id] = entry
        self._leaf = leaf_id

    async def _commit(self, stamped: Stamped) -> None:
        """Store a stamped batch in one append and apply it; on failure nothing changes."""
        async with self._lock:
            if stamped.durable:
                await self._store.append_entries(self._session_id, stamped.durable)
            self._apply(stamped)

    async def _persist(self, entries: Sequence[Entry]) -> Stamped:
        async with self._lock:
            stamped = stamp(entries, self._leaf, utc_now(), new_id)
            if stamped.durable:
                await self._store.append_entries(self._session_id, stamped.durable)
            self._apply(stamped)
            return stamped

    def _run_finished(self) -> None:
        self._running = False

    # -- verbs -------------------------------------------------------------------------------

    async def run(self, *entries: EntryLike, run_id: str | None = None) -> RunStream:
        """Start a run on ``entries`` (``str`` means ``text(s)``) and return its stream.

        Raises :class:`AgentClosedError` or :class:`RunActiveError` here; every later failure
        comes through the stream.
        """
        self._check_mutable()
        items = [as_entry(e) for e in entries]
        self._pending_run_id = run_id
        try:
            return await self._runner(items)
        finally:
            self._pending_run_id = None

    async def _base_run(self, entries: list[Entry]) -> RunStream:
        self._check_mutable()
        self._running = True
        try:
            return await self._executor.start_run(self, list(entries), self._pending_run_id)
        except BaseException:
            self._running = False
            raise

    async def append(self, *entries: EntryLike) -> list[Entry]:
        """Record entries at the leaf without running; returns the copies in input order."""
        self._check_mutable()
        stamped = await self._persist([as_entry(e) for e in entries])
        return stamped.copies

    async def branch(self, entry_id: str) -> None:
        """Move the leaf to ``entry_id`` (``""``: before the first entry)."""
        self._check_mutable()
        if entry_id != "" and entry_id not in self._index:
            raise EntryNotFoundError(
                f"entry {entry_id!r} is not a stored entry of session {self._session_id!r}"
            )
        async with self._lock:
            old = self._leaf
            self._leaf = entry_id
        await self._executor.publish(
            self,
            [
                Event(
                    type="session_branched",
                    session_id=self._session_id,
                    from_id=old,
                    leaf_id=entry_id,
                    idempotency_key=branched_key(self._session_id, new_id()),
                )
            ],
        )

    async def fork(self, new_session_id: str | None = None) -> Agent:
        """Copy the active path into a new child session and return its handle."""
        if self._closed:
            raise AgentClosedError(f"agent for session {self._session_id!r} is closed")
        child_id = validate_session_id(new_session_id or new_id())
        async with self._lock:
            snapshot = [e for e in self._path() if is_durable(e)]
        copies = _fork_copies(child_id, snapshot)
        await _create_or_resume_child(self._store, child_id, self._session_id, copies)
        if copies:
            await self._store.append_entries(child_id, copies)
        child = Agent(
            session_id=child_id,
            store=self._store,
            factory=self._factory,
            options=self._options,
            raw_options=self._raw_options,
            publisher=self._publisher,
            middleware=self._middleware,
            executor=self._executor,
            entries=copies,
        )
        await self._executor.publish(
            self,
            [
                Event(
                    type="session_forked",
                    session_id=child_id,
                    parent_id=self._session_id,
                    idempotency_key=forked_key(child_id, self._session_id),
                ),
                Event(
                    type="session_init",
                    session_id=child_id,
                    leaf_id=child.leaf_id,
                    idempotency_key=fork_init_key(child_id),
                ),
            ],
        )
        return child

    async def compact(
        self, keep_turns: int = 0, prompt: str | None = None
    ) -> CompactionEntry | None:
        """Summarize the path into an appended :class:`CompactionEntry`; ``None`` if nothing to
        do. Deletes nothing: branching to before the compaction restores the full view."""
        self._check_mutable()
        self._compacting = True
        try:
            return await self._executor.compact(self, keep_turns, prompt)
        finally:
            self._compacting = False

    async def close(self) -> None:
        """Refuse further mutations; reads keep working. Idempotent; a run is not touched."""
        self._closed = True

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _ActivePath:
    """The active path and its model views, cached for one leaf and extended as runs append.

    A leaf's path never changes (stored entries are immutable and the index only gains new IDs),
    so the cache is keyed by the leaf; a batch chained from the cached leaf extends it instead of
    re-walking the tree, and the views grow incrementally, so a run's cost does not scale with
    the transcript. Repair (SPEC §5.1) splits at any message that is not a ``tool_result``: the
    contiguous results an assistant message consumes end before it. ``settled`` is the repaired
    view of ``raw[:split]``; only the tail from ``split`` is repaired on each read.
    """

    def __init__(self, leaf: str, path: list[Entry]) -> None:
        self.leaf = leaf
        self.path = path
        self.raw: list[Message] | None = None
        self.settled: list[Message] = []
        self.split = 0

    def extend(self, leaf: str, entries: Sequence[Entry]) -> None:
        self.leaf = leaf
        self.path.extend(entries)
        if self.raw is None:
            return
        if any(isinstance(e, CompactionEntry) for e in entries):
            self.raw = None  # a new last compaction re-projects the view
        else:
            self.raw.extend(e.message for e in entries if isinstance(e, MessageEntry))

    def views(self) -> tuple[list[Message], list[Message]]:
        if self.raw is None:
            self.raw, self.settled, self.split = raw_model_view(self.path), [], 0
        raw = self.raw
        k = len(raw) - 1
        while k > self.split and raw[k].role == "tool_result":
            k -= 1
        if k > self.split:
            self.settled.extend(repair_tool_calls(raw[self.split : k]))
            self.split = k
        return list(raw), self.settled + repair_tool_calls(raw[self.split :])


def _fork_copies(child_id: str, snapshot: Sequence[Entry]) -> list[Entry]:
    """Copies with derived IDs, re-chained from ``None``, ``created_at`` and fields kept."""
    id_map = {e.id: fork_entry_id(child_id, e.id) for e in snapshot}
    copies: list[Entry] = []
    parent: str | None = None
    for entry in snapshot:
        update: dict[str, Any] = {"id": id_map[entry.id], "parent_id": parent}
        if isinstance(entry, CompactionEntry) and entry.first_kept_id in id_map:
            update["first_kept_id"] = id_map[entry.first_kept_id]
        copy = entry.model_copy(update=update)
        copies.append(copy)
        parent = copy.id
    return copies


async def _create_or_resume_child(
    store: Store, child_id: str, source_id: str, copies: Sequence[Entry]
) -> None:
    """Create the child, or accept one a failed earlier fork of the same source left behind."""
    try:
        await store.create_session(child_id, parent_id=source_id)
        return
    except SessionExistsError:
        pass
    load_session = getattr(store, "load_session", None)
    if load_session is not None:
        record = await load_session(child_id)
        if record.parent_id != source_id:
            raise SessionExistsError(child_id, f"it is not a fork of {source_id!r}")
    existing = await store.load_entries(child_id)
    expected = [encode_entry(c) for c in copies[: len(existing)]]
    if len(existing) > len(copies) or [encode_entry(e) for e in existing] != expected:
        raise SessionExistsError(child_id, "it has diverged from the fork source")


async def _open_entries(store: Store, session_id: str) -> list[Entry]:
    try:
        return await store.load_entries(session_id)
    except SessionNotFoundError:
        pass
    try:
        await store.create_session(session_id)
        return []
    except SessionExistsError:
        return await store.load_entries(session_id)


def _validate_options(options: dict[str, Any]) -> AgentOptions:
    if "history" in options:
        raise TypeError("history is not an agent option: it comes from the session")
    unknown = set(options) - set(AgentOptions.model_fields)
    if unknown:
        raise TypeError(f"unknown agent option(s): {', '.join(sorted(unknown))}")
    try:
        return AgentOptions(**options)
    except ValidationError as exc:
        raise TypeError(f"invalid agent options: {exc}") from exc


async def new(
    factory: Factory | str | None,
    *,
    store: Store | None = None,
    session_id: str | None = None,
    publisher: PublisherLike | None = None,
    middleware: Sequence[Middleware] = (),
    executor: Executor | None = None,
    **agent_options: Any,
) -> Agent:
    """Open the session ``session_id`` (creating it if unknown) and return a ready handle.

    There is no resume verb: a known ID resumes at its last appended entry. Without ``store`` a
    private MemoryStore is used; without ``session_id`` one is generated. Publishes
    ``session_init`` on create and on resume. Never writes or repairs entries.
    """
    runner = executor or LocalExecutor()
    options = _validate_options(agent_options)
    runner.check_options(factory, agent_options, publisher)
    sid = validate_session_id(session_id or new_id())
    if store is None:
        from ..stores.memory import MemoryStore

        store = MemoryStore()
    entries = await _open_entries(store, sid)
    agent = Agent(
        session_id=sid,
        store=store,
        factory=factory,  # type: ignore[arg-type]
        options=options,
        raw_options=dict(agent_options),
        publisher=publisher,
        middleware=middleware,
        executor=runner,
        entries=entries,
    )
    await runner.publish(
        agent,
        [
            Event(
                type="session_init",
                session_id=sid,
                leaf_id=agent.leaf_id,
                idempotency_key=init_key(sid, new_id()),
            )
        ],
    )
    return agent
