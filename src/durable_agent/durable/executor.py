"""Executors: where a run's engine runs and how lifecycle events reach the publisher.

The :class:`LocalExecutor` runs the engine in this process. The Temporal executor
(:mod:`durable_agent.workflows`) runs the same engine inside a workflow. Both receive the handle and
use only its small internal API (``_snapshot``, ``_commit``, ``_options``, …).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..agent.loop import Factory, build_loop
from ..ai.messages import Message
from ..ai.timefmt import utc_now
from ..session.entries import CompactionEntry, Entry
from ..session.ids import new_id
from ..session.repair import dangling_calls
from ..session.views import raw_model_view
from .compaction import plan_compaction, summarize
from .engine import RunEngine, repair_entries
from .errors import NoFactoryError, RunCancelledError
from .events import Event
from .persist import Stamped
from .publisher import PublisherLike, compacted_key, deliver
from .stream import LocalRunStream, RunStream

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["Executor", "LocalExecutor", "dangling_at"]


def dangling_at(
    path: Sequence[Entry], view: Sequence[Message] | None = None
) -> tuple[list[Entry], Message | None]:
    """Run-start repair for ``path``: the synthetic results to store (SPEC §5.2) and the
    dangling assistant message they answer. ``view``: ``raw_model_view(path)`` if already
    computed."""
    if view is None:
        view = raw_model_view(path)
    calls = dangling_calls(view)
    if not calls:
        return [], None
    j = len(view)
    while view[j - 1].role == "tool_result":
        j -= 1
    message = view[j - 1]
    return list(repair_entries(calls, message)), message


class Executor(Protocol):
    """How a handle runs, compacts and publishes."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        """Refuse what this executor cannot carry (raise TypeError/ValueError)."""
        ...

    async def start_run(
        self, agent: Agent, entries: list[Entry], run_id: str | None
    ) -> RunStream: ...

    async def compact(
        self, agent: Agent, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None: ...

    async def publish(self, agent: Agent, events: list[Event]) -> None: ...


class _LocalEffects:
    """RunEffects for an in-process run: the handle's store and state, and the stream's queue."""

    def __init__(self, agent: Agent, put: Any) -> None:
        self._agent = agent
        self._put = put

    def now(self) -> Any:
        return utc_now()

    def new_id(self) -> str:
        return new_id()

    async def commit(self, stamped: Stamped) -> None:
        await self._agent._commit(stamped)

    async def emit(self, event: Event) -> None:
        self._put(event)


class LocalExecutor:
    """Runs the engine in this process (the default)."""

    def check_options(
        self, factory: Any, options: dict[str, Any], publisher: PublisherLike | None
    ) -> None:
        if factory is not None and not callable(factory):
            raise TypeError("factory must be callable (or None for a record-only agent)")

    async def start_run(self, agent: Agent, entries: list[Entry], run_id: str | None) -> RunStream:
        factory: Factory | None = agent._factory
        raw, history = agent._views()
        leaf = agent.leaf_id

        async def produce(put: Any) -> list[Message]:
            try:
                if factory is None:
                    raise NoFactoryError("this agent has no factory: it records but never runs")
                options = agent._options.model_copy(update={"history": history})
                loop = await build_loop(factory, options)
                engine = RunEngine(agent.session_id, leaf, _LocalEffects(agent, put))
                try:
                    repairs, _ = dangling_at((), raw)
                    receipt = await engine.start(entries, repairs)
                    try:
                        await engine.drive(loop, entries, receipt)
                    except asyncio.CancelledError:
                        await asyncio.shield(engine.cancel())
                        raise RunCancelledError("run cancelled") from None
                    return list(engine.produced)
                finally:
                    await loop.aclose()
            finally:
                agent._run_finished()

        return LocalRunStream(produce, on_abandon=agent._run_finished)

    async def compact(
        self, agent: Agent, keep_turns: int, prompt: str | None
    ) -> CompactionEntry | None:
        path = agent._path()
        plan = plan_compaction(path, keep_turns)
        if plan is None:
            return None
        summary = await summarize(agent._factory, agent._options, plan.prefix, prompt)
        entry = CompactionEntry(
            summary=summary, first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before
        )
        stamped = await agent._persist([entry])
        stored = stamped.durable[0]
        assert isinstance(stored, CompactionEntry)
        await self.publish(
            agent,
            [
                Event(
                    type="session_compacted",
                    session_id=agent.session_id,
                    entries=[stored],
                    leaf_id=stamped.leaf_id,
                    idempotency_key=compacted_key(agent.session_id, stored.id),
                )
            ],
        )
        return stored

    async def publish(self, agent: Agent, events: list[Event]) -> None:
        await deliver(agent._publisher, events)
