"""The steps of the handle verbs that run as workflows of their own on Temporal: a compaction's
summary (``summarize``) and the publication of lifecycle events (``publish``), with the
workflow-side calls that schedule them (docs/design.md#compaction, docs/design.md#receipts).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

from ..agent.loop import ModelLoop
from ..agent.options import AgentOptions
from ..ai.model import ModelError
from ..durable.compaction import summary_entry
from ..durable.errors import CompactError
from ..durable.limits import as_stored
from ..durable.publisher import publish_one
from ..session.entries import CompactionEntry
from .base import ActivityBase, heartbeating
from .contracts import PublishInput, SummarizeInput, Timeouts, event_from_wire
from .failures import application_error
from .store_steps import store_retry

__all__ = ["VerbSteps", "publish", "summarize"]


class VerbSteps(ActivityBase):
    """``summarize`` and ``publish``."""

    @activity.defn(name="durable_agent.summarize")
    async def summarize(self, inp: SummarizeInput) -> CompactionEntry | None:
        """The compaction entry for the path at the leaf, its header not stamped yet (the
        compaction stamps it), or ``None`` when there is nothing to compact."""
        spec = self.agent_spec(inp.agent)
        p = await self.path_to(inp.session_id, inp.leaf_id)

        def factory(opts: AgentOptions) -> ModelLoop:
            return ModelLoop(spec.model, opts)

        try:
            async with heartbeating():
                options = spec.options(inp.options)
                entry = await summary_entry(factory, options, p, inp.keep_turns, inp.prompt)
        except CompactError as exc:
            cause = exc.__cause__
            retryable = isinstance(cause, ModelError) and cause.retryable
            raise application_error(exc, non_retryable=not retryable) from None
        if entry is not None:
            # checked here, like a model reply: a result Temporal refuses would fail this
            # activity after the model call, and each retry would call the model again
            self.check_size("compaction entry", as_stored(entry))
        return entry

    @activity.defn(name="durable_agent.publish")
    async def publish(self, inp: PublishInput) -> None:
        """Hand events to the worker's publisher, at least once (consumers dedupe by key)."""
        if self.publisher is None:
            return
        async with heartbeating():
            for wire in inp.events:
                await publish_one(self.publisher, event_from_wire(wire))


async def summarize(inp: SummarizeInput, t: Timeouts) -> CompactionEntry | None:
    """Schedule ``summarize`` (workflow side)."""
    entry: CompactionEntry | None = await workflow.execute_activity_method(
        VerbSteps.summarize,
        inp,
        start_to_close_timeout=timedelta(seconds=t.model_start_to_close),
        heartbeat_timeout=timedelta(seconds=t.model_heartbeat),
        retry_policy=store_retry(t),
        summary=f"summarize (keep {inp.keep_turns} turns)",
    )
    return entry


async def publish(inp: PublishInput) -> None:
    """Schedule ``publish`` (workflow side)."""
    t = inp.timeouts
    await workflow.execute_activity_method(
        VerbSteps.publish,
        inp,
        start_to_close_timeout=timedelta(seconds=t.store_start_to_close),
        heartbeat_timeout=timedelta(seconds=t.store_heartbeat),
        retry_policy=store_retry(t),
        summary="publish " + ", ".join(e.type for e in inp.events),
    )
