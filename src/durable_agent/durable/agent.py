"""The durable agent handle: open or create a session, run, append, branch, fork, compact.

A handle holds a :class:`~.state.SessionState`: the session's log (append order, ephemeral
included), an index of stored entries by ID, and the **leaf** where the next entry attaches. Edit,
retry and rewind are all ``branch`` (``edit`` and ``retry``: a ``branch`` to before the last
question, then a ``run``). Everything a handle records goes through :mod:`.persist` under the
state's lock; lifecycle events are published after the lock is released.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

from ..agent.loop import Factory
from ..ai.messages import Message
from ..session.approvals import ApprovalDecision, PendingItem, awaiting_turn, pending_items
from ..session.entries import CompactionEntry, Entry
from ..session.errors import SessionNotFoundError
from ..session.ids import new_id, validate_session_id
from ..session.store import Store, copy_into_child, open_session
from ..session.turns import Turn, last_turn
from ..session.views import model_view, transcript_view
from .deciding import decide
from .errors import ApprovalPendingError, EntryNotFoundError
from .executor import Executor, LocalExecutor
from .inputs import EntryLike, as_entry, check_agent_options, check_run_id, check_run_input
from .persist import is_durable
from .publisher import PublisherLike, branched_event, fork_events, init_event
from .reconcile import stored_answers
from .state import AgentConfig, SessionState
from .stream import RunStream

__all__ = ["Agent", "Middleware", "Runner", "fork_entry_id", "new"]

Runner = Callable[[list[Entry]], Awaitable[RunStream]]
"""Starts a run from its input entries."""
Middleware = Callable[[Runner], Runner]
"""Wraps the next runner; applied once per handle, first listed outermost."""


def fork_entry_id(child_session_id: str, source_entry_id: str) -> str:
    """The derived ID of a fork copy: stable, so a retried fork finds its own copies."""
    return hashlib.sha256(f"{child_session_id}\n{source_entry_id}".encode()).hexdigest()[:16]


class Agent:
    """A live handle on one session. Create it with :func:`new`; it belongs to one event loop."""

    def __init__(
        self,
        *,
        state: SessionState,
        config: AgentConfig,
        middleware: Sequence[Middleware],
        executor: Executor,
    ) -> None:
        self._state = state
        self._config = config
        self._middleware = tuple(middleware)
        self._executor = executor
        self._pending: tuple[str | None, bool] = (None, False)  # run()'s, past the middleware
        runner: Runner = self._base_run
        for mw in reversed(self._middleware):
            runner = mw(runner)
        self._runner = runner

    def __repr__(self) -> str:
        status = "closed" if self.closed else "running" if self.running else "idle"
        return f"<Agent session_id={self.session_id!r} leaf_id={self.leaf_id!r} {status}>"

    # -- reads -------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._state.session_id

    @property
    def leaf_id(self) -> str:
        """Where the next entry attaches; ``""`` before the first entry."""
        return self._state.leaf

    @property
    def store(self) -> Store:
        return self._state.store

    @property
    def state(self) -> SessionState:
        """The live session state executors work on (log, index, leaf, flags, lock)."""
        return self._state

    @property
    def config(self) -> AgentConfig:
        """Factory, options and publisher this handle was opened with."""
        return self._config

    @property
    def running(self) -> bool:
        return self._state.running

    @property
    def closed(self) -> bool:
        return self._state.closed

    def entries(self) -> list[Entry]:
        """The log in append order, ephemeral entries included (a copy)."""
        return list(self._state.log)

    def transcript(self) -> list[Entry]:
        """The active path as a person reads it (no meta or ephemeral messages)."""
        return transcript_view(self._state.path())

    def messages(self) -> list[Message]:
        """The active path as the model sees it (compaction applied, tool calls repaired): at a
        leaf whose calls have stored results after it, with those, as a run from it adopts."""
        answers = stored_answers(self._state)
        return model_view([*self._state.path(), *answers]) if answers else self._state.views()[1]

    def pending_approvals(self) -> list[PendingItem]:
        """The calls of the active path waiting for a person's decision, in call order (those
        of requests being stored too: the store holds them before the handle applied them)."""
        return self._state.pending()

    # -- verbs -------------------------------------------------------------------------------

    async def run(
        self, *entries: EntryLike, run_id: str | None = None, if_unchanged: bool = False
    ) -> RunStream:
        """Start a run on ``entries`` (``str`` means ``text(s)``) and return its stream.

        Raises :class:`AgentClosedError`, :class:`RunActiveError` or
        :class:`InvalidRunInputError` (an empty message, no input and nothing at the leaf to
        answer, a ``run_id`` not of 1-64 ASCII letters, digits, ``-`` and ``_``) here; every
        later failure comes through the stream.

        ``if_unchanged``: the run stores its input only if the session holds nothing this
        handle has not read (another process's run or decision); otherwise the run fails with
        :class:`RunActiveError`, nothing stored. What a server starts with, so that two of its
        replicas starting runs on one session at once do not both run
        (docs/design.md#http-api).
        """
        self._state.check_mutable()
        items = [as_entry(e) for e in entries]
        if run_id is not None:
            check_run_id(run_id)
        await self._catch_up_waiting(refuse=bool(items))
        self._pending = (run_id, if_unchanged)
        try:
            return await self._runner(items)
        finally:
            self._pending = (None, False)

    async def _catch_up_waiting(self, *, refuse: bool) -> None:
        """While the path's calls wait for people, take in what the store holds after them
        (another process may have decided them: a run goes on from the decisions; or a run
        carried them out: new input goes on after it); then ``refuse`` new input if they do."""
        if awaiting_turn(self._state.path()) is None:
            return
        await self._state.catch_up()
        if refuse and awaiting_turn(self._state.path()) is not None:
            raise ApprovalPendingError(
                f"tool calls on the path of session {self.session_id!r} wait for a decision "
                "(pending_approvals()): decide them and run() with no input, or branch away"
            )

    async def _base_run(self, entries: list[Entry]) -> RunStream:
        state = self._state
        state.check_mutable()
        # the input as it reaches the executor (middleware may have added to it)
        check_run_input(entries, nothing_stored=state.leaf == "")
        # An append or branch in flight commits first; the run then starts from its leaf, and
        # one still waiting for the lock is refused (it re-checks the busy rule under the lock).
        async with state.lock:
            state.check_mutable()
            state.running = True
        try:
            stream = await self._executor.start_run(
                state, self._config, list(entries), *self._pending
            )
        except BaseException:
            state.run_finished()
            raise
        stream.when_done(state.run_finished)
        stream.when_done(lambda: setattr(stream, "pending", pending_items(state.path())))
        return stream

    async def decide(
        self,
        tool_call_id: str,
        approved: bool,
        *,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
        decided_by: str | None = None,
    ) -> Entry:
        """Decide a pending call; returns the stored ``approval_decision`` (its receipt).

        A live run that waits for the call gets it; otherwise it is committed at the leaf and
        ``run()`` with no input continues. The first decision wins: a later different one
        raises :class:`ApprovalNotPendingError` naming it (docs/design.md#approvals-and-steering).
        """
        self._state.check_open()
        decision = ApprovalDecision(
            tool_call_id=tool_call_id,
            approved=approved,
            reason=reason,
            args=args,
            decided_by=decided_by,
        )
        return await decide(self._state, decision, getattr(self._executor, "decide_live", None))

    async def append(self, *entries: EntryLike) -> list[Entry]:
        """Record entries at the leaf without running; returns the copies in input order.
        :class:`ApprovalPendingError` while calls there wait for a decision, as ``run`` (an
        entry after them would leave them unanswered, no longer waiting)."""
        self._state.check_mutable()
        await self._catch_up_waiting(refuse=True)
        stamped = await self._state.persist([as_entry(e) for e in entries])
        return stamped.copies

    async def branch(self, entry_id: str) -> None:
        """Move the leaf to ``entry_id`` (``""``: before the first entry)."""
        state = self._state
        state.check_mutable()
        if entry_id != "" and entry_id not in state.index:
            raise EntryNotFoundError(
                f"entry {entry_id!r} is not a stored entry of session {state.session_id!r}"
            )
        async with state.lock:
            state.check_mutable()  # a run may have started while this waited for the lock
            old = state.leaf
            state.leaf = entry_id
        await self._executor.publish(
            self._config, [branched_event(state.session_id, old, entry_id, new_id())]
        )

    async def edit(
        self, entry: EntryLike, *more: EntryLike, run_id: str | None = None
    ) -> RunStream:
        """Replace the last question on the active path: branch to before it, then run ``entry``
        (and ``more``) there; the old question and its answers stay, a sibling branch. No
        question yet (:class:`EntryNotFoundError`) or an input ``run`` refuses: the leaf stays."""
        turn = self._last_turn("edit")
        items = [as_entry(e) for e in (entry, *more)]
        check_run_input(items, nothing_stored=False)
        return await self._run_before(turn, items, run_id)

    async def retry(self, *, run_id: str | None = None) -> RunStream:
        """Ask the last question on the active path again: branch to before it, then run its
        input again (the question and what was stored with it before the first reply: meta
        messages, custom entries), so the model sees what it saw; ephemeral inputs are not sent
        again. The earlier answer stays, a sibling branch. Refused like ``edit``."""
        turn = self._last_turn("retry")
        inputs = [e.model_copy(update={"id": "", "parent_id": None}) for e in turn.inputs]
        check_run_input(inputs, nothing_stored=False)
        return await self._run_before(turn, inputs, run_id)

    async def _run_before(self, turn: Turn, items: list[Entry], run_id: str | None) -> RunStream:
        """Branch to before ``turn`` and run ``items`` there. A run its executor refuses at once
        (on Temporal an input over the payload limit, a client on another store) puts the leaf
        back, as the refusals checked before the branch leave it: the next run would otherwise
        go on without the conversation."""
        old, before = self._state.leaf, turn.start.parent_id or ""
        await self.branch(before)
        try:
            return await self.run(*items, run_id=run_id)
        except Exception:
            if self._state.leaf == before and not self._state.running:
                await self.branch(old)
            raise

    def _last_turn(self, verb: str) -> Turn:
        self._state.check_mutable()
        turn = last_turn(self._state.path())
        if turn is None:
            where = f"the active path of session {self.session_id!r}"
            raise EntryNotFoundError(f"no question on {where} to {verb}")
        return turn

    async def fork(self, new_session_id: str | None = None) -> Agent:
        """Copy the active path into a new child session (docs/design.md#tree-and-views)."""
        state = self._state
        state.check_open()
        child_id, sid = validate_session_id(new_session_id or new_id()), state.session_id
        async with state.lock:
            snapshot = [e for e in state.path() if is_durable(e)]
        store = state.store  # the parent is stored (created as by a write), holds the path:
        held = await (store.load_entries(sid) if state.created else open_session(store, sid))
        state.created = True
        if snapshot and all(e.id != snapshot[-1].id for e in held):
            raise SessionNotFoundError(sid)  # deleted since: docs/design.md#retention
        copies = _fork_copies(child_id, snapshot)
        held_before = await copy_into_child(store, child_id, sid, copies)
        child = Agent(
            state=SessionState(child_id, store, copies),
            config=self._config,
            middleware=self._middleware,
            executor=self._executor,
        )
        # one taking a child made before on to a longer path is another occurrence
        longer = 0 < held_before < len(copies)
        occurrence = fork_entry_id(child_id, child.leaf_id) if longer else None
        await self._executor.publish(
            self._config, fork_events(child_id, sid, child.leaf_id, occurrence)
        )
        return child

    async def compact(
        self, keep_turns: int = 0, prompt: str | None = None
    ) -> CompactionEntry | None:
        """Summarize the path into an appended :class:`CompactionEntry`; ``None`` if nothing to
        do. Deletes nothing: branching to before the compaction restores the full view."""
        state = self._state
        state.check_mutable()
        async with state.lock:  # like a run: after any append in flight, and exclusive
            state.check_mutable()
            state.compacting = True
        try:
            return await self._executor.compact(state, self._config, keep_turns, prompt)
        finally:
            state.compacting = False

    async def close(self) -> None:
        """Refuse further mutations; reads keep working. Idempotent; a run is not touched."""
        self._state.closed = True

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


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


async def new(
    factory: Factory | str | None,
    *,
    store: Store | None = None,
    session_id: str | None = None,
    publisher: PublisherLike | None = None,
    middleware: Sequence[Middleware] = (),
    executor: Executor | None = None,
    create: bool = True,
    **agent_options: Any,
) -> Agent:
    """Open the session ``session_id`` (creating it if unknown) and return a ready handle.

    There is no resume verb: a known ID resumes at its last appended entry. Without ``store`` a
    private MemoryStore is used; without ``session_id`` one is generated. Publishes
    ``session_init`` on create and on resume. Never writes or repairs entries. On Temporal an
    unknown session is created by its first run, once the worker has checked the agent (a run
    that cannot start creates nothing), or by the handle's first write or fork.

    ``create=False``: only a stored session (else :class:`SessionNotFoundError`), never created
    by the handle, so a delete landing meanwhile is not undone (its writes fail instead).
    """
    runner = executor or LocalExecutor()
    options = check_agent_options(agent_options)
    runner.check_options(factory, agent_options, publisher)
    sid = validate_session_id(session_id or new_id())
    if store is None:
        from ..stores.memory import MemoryStore

        store = MemoryStore()
    if create:
        entries, created = await runner.open(store, sid)
    else:
        entries, created = await store.load_entries(sid), True
    config = AgentConfig(
        factory=factory, options=options, raw_options=dict(agent_options), publisher=publisher
    )
    agent = Agent(
        state=SessionState(sid, store, entries, created=created),
        config=config,
        middleware=middleware,
        executor=runner,
    )
    await runner.publish(config, [init_event(sid, agent.leaf_id, new_id())])
    return agent
