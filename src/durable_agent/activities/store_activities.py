"""The store-side activities: open the session, load the run's path, append, summarize, publish.

Each reads or writes the worker's store (never the transcript through history) and heartbeats
after a short grace period, so a worker killed inside one is noticed quickly.
"""

from __future__ import annotations

from temporalio import activity

from ..agent.loop import ModelLoop
from ..agent.options import AgentOptions
from ..ai.model import ModelError
from ..durable.compaction import plan_compaction, summarize
from ..durable.errors import CompactError
from ..durable.publisher import publish_one
from ..session.codec import encode_entry
from ..session.entries import Entry
from ..session.errors import EntryConflictError, SessionError
from ..session.repair import start_repairs
from ..session.store import open_session
from ..session.views import raw_model_view
from .base import STORE_GRACE, ActivityBase, heartbeating
from .failures import application_error
from .reset_leaf import recorded_start_leaf
from .types import (
    AppendInput,
    AppendResult,
    EnsureSessionInput,
    LoadPathInput,
    PathInfo,
    PublishInput,
    SummarizeInput,
    SummaryResult,
    ToolInfo,
    decode_entries,
    stored_times,
    with_stored_times,
)
from .wire import event_from_wire

__all__ = ["StoreActivities"]


class StoreActivities(ActivityBase):
    """``ensure_session``, ``load_path``, ``append_entries``, ``summarize`` and ``publish``."""

    @activity.defn(name="durable_agent.ensure_session")
    async def ensure_session(self, inp: EnsureSessionInput) -> str:
        """Create the session if absent; return its last appended entry ID (``""`` if empty).
        An unknown agent fails first, so it creates nothing."""
        self.agent_spec(inp.agent)
        session_id = inp.session_id
        try:
            async with heartbeating(STORE_GRACE):
                entries = await open_session(self.store, session_id)
        except SessionError as exc:
            raise application_error(exc) from exc
        workflow_id = activity.info().workflow_id
        if inp.reset_of and workflow_id:
            # a reset retries the run from where it started, not from the newest entry now
            leaf = await recorded_start_leaf(workflow_id, inp.reset_of)
            if leaf is not None and (leaf == "" or any(e.id == leaf for e in entries)):
                return leaf
        return entries[-1].id if entries else ""

    @activity.defn(name="durable_agent.load_path")
    async def load_path(self, inp: LoadPathInput) -> PathInfo:
        """Check the leaf and the agent before the run writes anything; return the repairs."""
        spec = self.agent_spec(inp.agent)
        async with heartbeating(STORE_GRACE):
            p = await self.path_to(inp.session_id, inp.leaf_id)
        repairs = start_repairs(raw_model_view(p))
        tools = [
            ToolInfo(
                name=t.name,
                parallel_safe=t.parallel_safe,
                max_attempts=t.retry.max_attempts,
                initial_interval=t.retry.initial_interval,
                backoff=t.retry.backoff,
                max_interval=t.retry.max_interval,
                non_retryable=list(t.retry.non_retryable),
                timeout=t.timeout,
            )
            for t in spec.tools
        ]
        return PathInfo(
            repairs=[e.message for e in repairs],
            tools=tools,
            max_turns=spec.max_turns,
        )

    @activity.defn(name="durable_agent.append_entries")
    async def append_entries(self, inp: AppendInput) -> AppendResult:
        """Store entries the workflow stamped; retry-safe because appends are idempotent by ID.
        Returns the stored times (see :class:`AppendResult`)."""
        entries = decode_entries(inp.entries)
        try:
            async with heartbeating(STORE_GRACE):
                try:
                    await self.store.append_entries(inp.session_id, entries)
                except EntryConflictError:
                    entries = await self._adopt_earlier_stamps(inp.session_id, entries)
        except SessionError as exc:
            raise application_error(exc) from exc
        return AppendResult(times=[stored_times(e) for e in entries])

    async def _adopt_earlier_stamps(self, session_id: str, entries: list[Entry]) -> list[Entry]:
        """Settle a conflict that is only the clock: ``entries`` as the store holds them.

        A run's input and repairs are committed by a local activity inside a workflow task. If
        the worker dies after that write but before the task completes, another worker runs the
        task again: the same entry IDs (the run's random source is seeded once) but another
        ``workflow.now()``, so the same entries come with other ``created_at`` (and message
        timestamps the run stamped). The stored ones win, as for a producer's commit: the
        result names their times, which the workflow adopts (``AppendResult``). Entries not
        stored yet are appended; any other difference is a real conflict and raises.
        """
        stored = {e.id: e for e in await self.store.load_entries(session_id)}
        settled: list[Entry] = []
        missing: list[Entry] = []
        for entry in entries:
            earlier = stored.get(entry.id)
            if earlier is None:
                missing.append(entry)
                settled.append(entry)
                continue
            same = with_stored_times(entry, stored_times(earlier))
            if encode_entry(same) != encode_entry(earlier):
                raise EntryConflictError(session_id, entry.id)
            settled.append(earlier)
        if missing:
            await self.store.append_entries(session_id, missing)
        return settled

    @activity.defn(name="durable_agent.summarize")
    async def summarize(self, inp: SummarizeInput) -> SummaryResult | None:
        """Plan and run a compaction's summarizer from the store (SPEC §4.8 steps 2-7)."""
        spec = self.agent_spec(inp.agent)
        p = await self.path_to(inp.session_id, inp.leaf_id)
        plan = plan_compaction(p, inp.keep_turns)
        if plan is None:
            return None
        options = spec.options(inp.options)

        def factory(opts: AgentOptions) -> ModelLoop:
            return ModelLoop(spec.model, opts)

        try:
            async with heartbeating():
                text = await summarize(factory, options, plan.prefix, inp.prompt)
        except CompactError as exc:
            cause = exc.__cause__
            retryable = isinstance(cause, ModelError) and cause.retryable
            raise application_error(exc, non_retryable=not retryable) from None
        return SummaryResult(
            summary=text, first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before
        )

    @activity.defn(name="durable_agent.publish")
    async def publish(self, inp: PublishInput) -> None:
        """Hand events to the worker's publisher, at least once (consumers dedupe by key)."""
        if self.publisher is None:
            return
        async with heartbeating(STORE_GRACE):
            for wire in inp.events:
                await publish_one(self.publisher, event_from_wire(wire))
