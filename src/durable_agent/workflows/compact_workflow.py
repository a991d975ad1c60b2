"""The compaction workflow: summarize from the store, append the entry, publish the event."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ..durable.lifecycle import compacted_event
    from ..durable.persist import stamp
    from ..session.codec import encode_entry
    from ..session.entries import CompactionEntry
    from .activity_calls import call_activity, ensure_session_attribute, store_retry
    from .run_workflow import workflow_id_new
    from .types import (
        AppendInput,
        AppendResult,
        CompactInput,
        PublishInput,
        SummarizeInput,
        SummaryResult,
        event_to_wire,
        with_stored_times,
    )

__all__ = ["CompactWorkflow"]


@workflow.defn(name="durable_agent.compact")
class CompactWorkflow:
    """ID ``durable-agent/<session_id>/compact/<op_id>``; returns the stored entry (encoded) or
    ``None`` when there was nothing to compact."""

    @workflow.run
    async def run(self, inp: CompactInput) -> str | None:
        t = inp.timeouts
        ensure_session_attribute(inp.session_id)
        result = await call_activity(
            "durable_agent.summarize",
            SummarizeInput(
                session_id=inp.session_id,
                agent=inp.agent,
                leaf_id=inp.leaf_id,
                keep_turns=inp.keep_turns,
                prompt=inp.prompt,
                options=inp.options,
            ),
            SummaryResult,
            start_to_close=t.model_start_to_close,
            heartbeat=t.model_heartbeat,
            retry=store_retry(t),
            summary=f"summarize (keep {inp.keep_turns} turns)",
        )
        if result is None:
            return None
        entry = CompactionEntry(
            summary=result.summary,
            first_kept_id=result.first_kept_id,
            tokens_before=result.tokens_before,
            created_at=workflow.now(),
        )
        stamped = stamp([entry], inp.leaf_id, workflow.now(), workflow_id_new)
        written = await call_activity(
            "durable_agent.append_entries",
            AppendInput(session_id=inp.session_id, entries=[encode_entry(stamped.durable[0])]),
            AppendResult,
            start_to_close=t.store_start_to_close,
            retry=store_retry(t),
            heartbeat=t.store_heartbeat,
            summary="append compaction",
        )
        stored = with_stored_times(stamped.durable[0], written.times[0])
        event = compacted_event(inp.session_id, stored)
        await call_activity(
            "durable_agent.publish",
            PublishInput(events=[event_to_wire(event)]),
            None,
            start_to_close=t.store_start_to_close,
            retry=store_retry(t),
            heartbeat=t.store_heartbeat,
            summary="publish session_compacted",
        )
        return encode_entry(stored)
