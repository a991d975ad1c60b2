"""The publish workflow: lifecycle events of client verbs (new, branch, fork), at least once.

Its ID is ``durable-agent/publish/<idempotency_key>``, so a repeated start is rejected rather than
publishing twice; a fork's two events share one workflow and keep their order.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ..activities import verb_steps
    from ..activities.contracts import PublishInput
    from .search import ensure_session_attribute

__all__ = ["PublishWorkflow"]


@workflow.defn(name="durable_agent.publish")
class PublishWorkflow:
    @workflow.run
    async def run(self, inp: PublishInput) -> None:
        if inp.events:
            ensure_session_attribute(inp.events[0].session_id)
        await verb_steps.publish(inp)
