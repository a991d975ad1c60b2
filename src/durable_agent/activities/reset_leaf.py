"""Where a reset run starts: the leaf its original execution resolved (issue 15 item 8).

A run started without a leaf (from the Temporal UI, say) continues the session's newest entry,
which its ``ensure_session`` activity resolves. An operator's ``temporal workflow reset`` to the
first workflow task runs that activity again, by which time the newest entry may be another
run's answer, or the run's own. A reset is a retry of the run from where it started, so the
activity reads the leaf the original execution's ``ensure_session`` returned (an ordinary
activity's completion, or since ``local-store-v1`` a local activity's marker) from that
execution's history (kept by Temporal for the namespace's retention period) instead.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError

from .markers import local_activity_result

__all__ = ["ENSURE_SESSION", "recorded_start_leaf"]

ENSURE_SESSION = "durable_agent.ensure_session"


async def recorded_start_leaf(workflow_id: str, run_id: str) -> str | None:
    """The leaf ``ensure_session`` returned in execution ``run_id`` of ``workflow_id``, or
    ``None`` when that execution never got one or its history is gone (then the caller falls
    back to the newest entry, as a fresh start would)."""
    try:
        client = activity.client()
    except RuntimeError:  # an activity run outside a worker (unit tests): no history to read
        return None
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    scheduled: set[int] = set()
    try:
        async for event in handle.fetch_history_events():
            local = local_activity_result(event, ENSURE_SESSION)  # since local-store-v1
            if local:
                [leaf] = await client.data_converter.decode(local, [str])
                return leaf if isinstance(leaf, str) else None
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == ENSURE_SESSION:
                    scheduled.add(event.event_id)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                if done.scheduled_event_id in scheduled:
                    [leaf] = await client.data_converter.decode(done.result.payloads, [str])
                    return leaf if isinstance(leaf, str) else None
    except RPCError as exc:
        activity.logger.warning(
            "reset of %s: the original run %s is unreadable (%s); starting from the newest entry",
            workflow_id,
            run_id,
            exc.message,
        )
    return None
