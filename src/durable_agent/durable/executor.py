"""Executors: where a run's engine runs and how lifecycle events reach the publisher.

The :class:`LocalExecutor` runs the engine in this process. The Temporal executor
(:mod:`durable_agent.workflows`) runs the same engine inside a workflow. Both receive the handle's
public :class:`~.state.SessionState` and :class:`~.state.AgentConfig`, and supply effects only:
the run itself (repair, input, drive, failure, cancellation) is :meth:`RunEngine.run`.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..agent.loop import Factory, build_loop
from ..ai.messages import Message
from ..ai.timefmt import utc_now
from ..session.entries import CompactionEntry, Entry
from ..session.ids import new_id
from ..session.repair import start_repairs
from .compaction import plan_compaction, summarize
from .engine import RunEngine
from .errors import NoFactoryError
from .events import Event
from .lifecycle import compacted_event
from .persist import Stamped
from .publisher import PublisherLike, deliver
from .reconcile import reconcile
from .state import AgentConfig, SessionState
from .stream import LocalRunStream, RunStream

__all__ = ["Executor", "LocalExecutor"]


class Executor(Protocol):
    """How a handle runs, compacts and publishes."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        """Refuse what this executor cannot carry (raise TypeError/ValueError)."""
        ...

    async def start_run(
        self, state: SessionState, config: AgentConfig, entries: list[Entry], run_id: str | None
    ) -> RunStream:
        """Start a run from ``state.leaf`` as :func:`~.reconcile.reconcile` leaves it (the
        handle holds the busy flag, so no write is in flight and nothing else moves the leaf)."""
        ...

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None: ...

    async def publish(self, config: AgentConfig, events: list[Event]) -> None: ...


class _LocalEffects:
    """RunEffects for an in-process run: the handle's state, and the stream's queue."""

    def __init__(self, state: SessionState, put: Any) -> None:
        self._state = state
        self._put = put

    def now(self) -> Any:
        return utc_now()

    def new_id(self) -> str:
        return new_id()

    async def commit(self, stamped: Stamped) -> None:
        await self._state.commit(stamped)

    async def emit(self, event: Event) -> None:
        self._put(event)


class LocalExecutor:
    """Runs the engine in this process (the default)."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        if factory is not None and not callable(factory):
            raise TypeError("factory must be callable (or None for a record-only agent)")

    async def start_run(
        self, state: SessionState, config: AgentConfig, entries: list[Entry], run_id: str | None
    ) -> RunStream:
        factory: Factory | None = config.factory

        async def produce(put: Any) -> list[Message]:
            if factory is None:
                raise NoFactoryError("this agent has no factory: it records but never runs")
            # the handle is busy, so nothing moves the leaf meanwhile: catch up with writes of
            # a failed run that landed, so repair answers only truly unanswered calls (11.8b)
            await reconcile(state)
            raw, history = state.views()
            leaf = state.leaf
            options = config.options.model_copy(update={"history": history})
            loop = await build_loop(factory, options)
            try:
                engine = RunEngine(state.session_id, leaf, _LocalEffects(state, put))
                return await engine.run(loop, entries, start_repairs(raw))
            finally:
                await loop.aclose()

        return LocalRunStream(produce)

    async def compact(
        self, state: SessionState, config: AgentConfig, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None:
        plan = plan_compaction(state.path(), keep_turns)
        if plan is None:
            return None
        summary = await summarize(config.factory, config.options, plan.prefix, prompt)
        entry = CompactionEntry(
            summary=summary, first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before
        )
        stamped = await state.persist([entry], check=False)
        stored = stamped.durable[0]
        assert isinstance(stored, CompactionEntry)
        await self.publish(config, [compacted_event(state.session_id, stored)])
        return stored

    async def publish(self, config: AgentConfig, events: list[Event]) -> None:
        await deliver(config.publisher, events)
