"""The workflows of the handle verbs (their steps: ``activities.verb_steps``).

The compaction workflow is the one compaction flow (``durable.compaction.compact``) with
activities as its effects: ``summarize`` from the store, ``append_entries``, ``publish``. The
publish workflow delivers the lifecycle events of client verbs (new, branch, fork) at least once:
its ID is ``durable-agent/publish/<idempotency_key>``, so a repeated start is rejected rather than
publishing twice; a fork's two events share one workflow and keep their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError

# Not passed through, as in run_workflow: the sandbox loaded these with the package already
from .run_input import NO_INPUT
from .typed_input import read_compact_input

with workflow.unsafe.imports_passed_through():
    from ..activities import verb_steps
    from ..activities.contracts import PublishInput, SummarizeInput, event_to_wire
    from ..activities.failures import is_cancellation, run_failure
    from ..activities.run_contracts import CompactInput
    from ..activities.store_steps import append, new_entry_id
    from ..durable.compaction import compact
    from ..durable.events import Event
    from ..durable.persist import Stamped
    from ..session.codec import encode_entry
    from ..session.entries import CompactionEntry
    from .search import ensure_session_attribute

__all__ = ["CompactWorkflow", "PublishWorkflow"]

T = TypeVar("T")


async def _past_cancellation(step: Awaitable[T]) -> T:
    """``step`` carried out even if the workflow is cancelled meanwhile: once the summary is
    made, the entry is stored and announced and the workflow returns it, so a cancelled
    compaction either stored nothing or tells its caller what it stored."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        return await task


@workflow.defn(name="durable_agent.compact")
class CompactWorkflow:
    """ID ``durable-agent/<session_id>/compact/<op_id>``; returns the stored entry (encoded) or
    ``None`` when there was nothing to compact."""

    def __init__(self) -> None:
        self._input: CompactInput | None = None

    @workflow.run
    async def run(self, raw: RawValue = NO_INPUT) -> str | None:
        """Compact: what an operator typed is read (and refused, typed) by the reader."""
        inp = read_compact_input(raw)
        self._input = inp
        ensure_session_attribute(inp.session_id)
        try:
            stored = await compact(self, inp.session_id, inp.leaf_id, inp.keep_turns, inp.prompt)
        except ActivityError as exc:
            if is_cancellation(exc):
                raise
            # its step's failure at the top, typed, as a run's (``UnknownAgentError`` naming
            # the agent), not ``Activity task failed``; the cause chain kept
            raise run_failure(exc) from exc
        return None if stored is None else encode_entry(stored)

    # -- effects (CompactionEffects) ---------------------------------------------------------

    @property
    def _inp(self) -> CompactInput:
        assert self._input is not None
        return self._input

    def now(self) -> datetime:
        return workflow.now()

    def new_id(self) -> str:
        return new_entry_id()

    async def summarize(self, keep_turns: int, prompt: str | None) -> CompactionEntry | None:
        inp = self._inp
        summary = SummarizeInput(
            session_id=inp.session_id,
            agent=inp.agent,
            leaf_id=inp.leaf_id,
            keep_turns=keep_turns,
            prompt=prompt,
            options=inp.options,
        )
        return await verb_steps.summarize(summary, inp.timeouts)

    async def commit(self, stamped: Stamped) -> Stamped:
        inp = self._inp
        return await _past_cancellation(
            append(inp.session_id, stamped, inp.timeouts, local=False, summary="append compaction")
        )

    async def publish(self, event: Event) -> None:
        events = [event_to_wire(event)]
        await _past_cancellation(
            verb_steps.publish(PublishInput(events=events, timeouts=self._inp.timeouts))
        )


@workflow.defn(name="durable_agent.publish")
class PublishWorkflow:
    @workflow.run
    async def run(self, inp: PublishInput) -> None:
        if inp.events:
            ensure_session_attribute(inp.events[0].session_id)
        await verb_steps.publish(inp)
