"""The publish workflow: lifecycle events of client verbs (new, branch, fork), at least once.

Its ID is ``durable-agent/publish/<idempotency_key>``, so a repeated start is rejected rather than
publishing twice; a fork's two events share one workflow and keep their order.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from .activity_calls import call_activity, ensure_session_attribute, store_retry
    from .types import PublishInput

__all__ = ["PublishWorkflow"]


@workflow.defn(name="durable_agent.publish")
class PublishWorkflow:
    @workflow.run
    async def run(self, inp: PublishInput) -> None:
        t = inp.timeouts
        if inp.events:
            ensure_session_attribute(inp.events[0].session_id)
        await call_activity(
            "durable_agent.publish",
            inp,
            None,
            start_to_close=t.store_start_to_close,
            retry=store_retry(t),
            heartbeat=t.store_heartbeat,
            summary="publish " + ", ".join(e.type for e in inp.events),
        )
