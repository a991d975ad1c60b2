"""Executors: where a run's engine runs and how lifecycle events reach the publisher.

The :class:`LocalExecutor` runs the engine in this process. The Temporal executor
(:mod:`durable_agent.workflows`) runs the same engine inside a workflow. Both receive the handle's
public :class:`~.state.SessionState` and :class:`~.state.AgentConfig`, and supply effects only:
the run itself (repair, input, drive, failure, cancellation) is :meth:`RunEngine.run`, and a
compaction is :func:`~.compaction.compact` (docs/design.md#handle-and-engine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from ..agent.loop import Factory, build_loop
from ..ai.messages import Message
from ..ai.timefmt import utc_now
from ..session.appendplan import Guard
from ..session.approvals import awaiting_turn
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.ids import new_id
from ..session.repair import start_repairs
from ..session.store import Store, open_session
from ..session.views import history_view
from .approvals import LocalGate
from .compaction import compact, summary_entry
from .engine import RunEngine
from .errors import NoFactoryError, RunActiveError, RunNotAcceptingError
from .events import Event
from .inbox import When
from .persist import Stamped
from .publisher import PublisherLike, deliver
from .reconcile import reconcile
from .state import AgentConfig, LeafMovedOn, SessionState
from .stream import LocalRunStream, RunStream

__all__ = ["Executor", "LocalExecutor"]


class Executor(Protocol):
    """How a handle runs, compacts and publishes."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        """Refuse what this executor cannot carry (raise TypeError/ValueError)."""
        ...

    async def open(self, store: Store, session_id: str) -> tuple[list[Entry], bool]:
        """The session's entries, and whether the store holds the session (``False``: not
        created yet, see :attr:`SessionState.created`)."""
        ...

    async def start_run(
        self,
        state: SessionState,
        config: AgentConfig,
        entries: list[Entry],
        run_id: str | None,
        if_unchanged: bool = False,
    ) -> RunStream:
        """Start a run from ``state.leaf`` as :func:`~.reconcile.reconcile` leaves it (the
        handle holds the busy flag, so no write is in flight and nothing else moves the leaf).
        ``if_unchanged``: the run's first write is guarded by the newest entry the handle
        knows then (another process's write since: the run fails, ``RunActiveError``)."""
        ...

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None: ...

    async def publish(self, config: AgentConfig, events: list[Event]) -> None: ...


class _LocalEffects:
    """The effects of an in-process run or compaction: the handle's state, the stream's queue
    (runs), the handle's factory and publisher (compactions)."""

    def __init__(
        self, state: SessionState, config: AgentConfig, put: Callable[[Event], None] | None = None
    ) -> None:
        self._state = state
        self._config = config
        self.put = put
        """Where a run's events go (the stream's queue, given once the run's task starts)."""
        self.guard: Guard | None = None
        """The condition of the next commit only (a run's input: ``if_unchanged``)."""

    def now(self) -> datetime:
        return utc_now()

    def new_id(self) -> str:
        return new_id()

    async def commit(self, stamped: Stamped) -> Stamped:
        guard, self.guard = self.guard, None
        try:
            await self._state.commit(stamped, guard)
        except LeafMovedOn:
            raise RunActiveError.changed_meanwhile(self._state.session_id) from None
        return stamped

    async def emit(self, event: Event) -> None:
        assert self.put is not None
        self.put(event)

    async def summarize(self, keep_turns: int, prompt: str | None) -> CompactionEntry | None:
        config = self._config
        return await summary_entry(
            config.factory, config.options, self._state.path(), keep_turns, prompt
        )

    async def publish(self, event: Event) -> None:
        await deliver(self._config.publisher, [event])


def _run_gone(state: SessionState, engine: RunEngine) -> None:
    """The run ended (or never got to start): nothing reaches it any more, and what it was
    handed before it started is refused (a run that started answered everything itself)."""
    if state.live_run is engine:
        state.live_run = None
    engine.inbox.close("it has ended", RunNotAcceptingError("the run ended before it started"))


class LocalExecutor:
    """Runs the engine in this process (the default)."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        if factory is not None and not callable(factory):
            raise TypeError("factory must be callable (or None for a record-only agent)")

    async def open(self, store: Store, session_id: str) -> tuple[list[Entry], bool]:
        return await open_session(store, session_id), True

    async def start_run(
        self,
        state: SessionState,
        config: AgentConfig,
        entries: list[Entry],
        run_id: str | None,
        if_unchanged: bool = False,
    ) -> RunStream:
        factory: Factory | None = config.factory
        rid = run_id or new_id()
        effects = _LocalEffects(state, config)
        # the run takes decisions and messages from the moment it exists, before it has loaded
        # the session and built its loop, as a run workflow does from its start
        # (docs/design.md#approvals-and-steering)
        engine = RunEngine(state.session_id, state.leaf, effects, run_id=rid)
        engine.gate = LocalGate(config.options, engine.inbox)
        state.live_run = engine

        async def produce(put: Callable[[Event], None]) -> list[Message]:
            effects.put = put
            loop = None
            try:
                if factory is None:
                    raise NoFactoryError("this agent has no factory: it records but never runs")
                # the handle is busy, so nothing moves the leaf meanwhile: catch up with writes
                # of a failed run that landed, so repair answers only truly unanswered calls
                await reconcile(state)
                if if_unchanged:
                    effects.guard = Guard(state.known_last())
                # the loop starts from the model view at the leaf (the handle keeps it cached)
                # and appends the run's messages: the formula session.views.run_view reads back;
                # a turn whose calls wait for people is never repaired: the run waits on it and
                # starts from its stored reply (docs/design.md#approvals-and-steering)
                raw, history = state.views()
                waiting = awaiting_turn(state.path())
                if waiting is not None:
                    history = history_view(state.path(), waiting.index)
                options = config.options.model_copy(update={"history": history})
                loop = await build_loop(factory, options)
                engine.leaf_id = state.leaf
                repairs = [] if waiting is not None else start_repairs(raw)
                return await engine.run(loop, entries, repairs, waiting=waiting)
            finally:
                _run_gone(state, engine)  # before any await: nothing is queued unanswered
                if loop is not None:
                    await loop.aclose()

        async def send(entry: MessageEntry, when: When) -> Entry:
            # a sender that stops waiting must not cancel what the run answers: the message
            # stays accepted (docs/design.md#approvals-and-steering)
            return await asyncio.shield(engine.inbox.send(entry, when))

        stream = LocalRunStream(produce, sender=send, run_id=rid)
        stream.when_done(lambda: _run_gone(state, engine))  # cancelled before its first step
        return stream

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None:
        effects = _LocalEffects(state, config)
        return await compact(effects, state.session_id, state.leaf, keep_turns, prompt)

    async def publish(self, config: AgentConfig, events: list[Event]) -> None:
        await deliver(config.publisher, events)
