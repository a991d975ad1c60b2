"""How workflow code calls activities: names, timeouts and retry policies suited to LLM work.

Workflows refer to activities by name (no import of the activity implementations into the
sandbox). Model calls heartbeat, so a crashed worker is noticed within ``heartbeat_timeout``;
store writes retry only while the store is unavailable. It sits in ``activities/`` beside the
activity-backed proxies that use it; :mod:`durable_agent.workflows.activity_calls` re-exports it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError
from temporalio.workflow import ActivityCancellationType

from ..session.entries import MessageEntry
from .types import Timeouts

__all__ = [
    "STORE_NON_RETRYABLE",
    "call_activity",
    "store_retry",
    "store_summary",
    "workflow_id_new",
]

T = TypeVar("T")

STORE_NON_RETRYABLE = [
    "SessionNotFoundError",
    "SessionExistsError",
    "InvalidSessionIdError",
    "EntryConflictError",
    "EntryDecodeError",
    "CorruptSessionError",
    "EntryTooLargeError",
    "ValueError",
]


def workflow_id_new() -> str:
    """An entry ID inside a workflow: from ``workflow.random()``, so replay reproduces it."""
    return f"{workflow.random().getrandbits(64):016x}"


def store_retry(t: Timeouts) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=t.retry_initial),
        maximum_interval=timedelta(seconds=t.retry_max),
        maximum_attempts=t.store_max_attempts,
        non_retryable_error_types=STORE_NON_RETRYABLE,
    )


async def call_activity(
    name: str,
    arg: Any,
    result_type: type[T] | None,
    *,
    start_to_close: float,
    retry: RetryPolicy,
    summary: str,
    heartbeat: float | None = None,
    wait_for_cancel: bool = False,
    local: bool = False,
) -> T:
    """Execute activity ``name`` with the given policy; the summary shows in the Temporal UI.

    ``local`` runs it as a local activity: on the worker holding the workflow task, inside that
    task, its result recorded as one marker event. A short store step (the run's start, its input
    commit) then costs no server round trip and no activity task; a worker lost inside one is
    noticed by the workflow task timeout instead of a heartbeat, which is why model and tool calls
    stay ordinary activities."""
    cancellation = (
        ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        if wait_for_cancel
        else ActivityCancellationType.TRY_CANCEL
    )
    result: T
    if local:
        try:
            result = await workflow.execute_local_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timedelta(seconds=start_to_close),
                retry_policy=retry,
                cancellation_type=cancellation,
                summary=summary,
            )
        except ActivityError:
            raise
        except FailureError as exc:
            # a local activity's failure arrives as its bare cause (the ApplicationError it
            # raised, a timeout, a cancellation): give callers the shape ordinary ones have
            raise ActivityError(
                f"local activity {name} failed",
                scheduled_event_id=0,
                started_event_id=0,
                identity="",
                activity_type=name,
                activity_id="",
                retry_state=None,
            ) from exc
        return result
    result = await workflow.execute_activity(
        name,
        arg,
        result_type=result_type,
        start_to_close_timeout=timedelta(seconds=start_to_close),
        heartbeat_timeout=None if heartbeat is None else timedelta(seconds=heartbeat),
        retry_policy=retry,
        cancellation_type=cancellation,
        summary=summary,
    )
    return result


def store_summary(entries: list[Any]) -> str:
    """What an ``append_entries`` activity stores, in words (its summary in the Temporal UI)."""
    messages = [e.message for e in entries if isinstance(e, MessageEntry)]
    repairs = sum(1 for e in entries if isinstance(e, MessageEntry) and e.synthetic)
    rest = len(entries) - repairs
    parts = []
    if repairs:
        parts.append(f"repair ({repairs} call{'' if repairs == 1 else 's'})")
    if rest:
        results = [m for m in messages if m.role == "tool_result"]
        if messages and len(results) == rest and all(m.is_error for m in results):
            cancelled = all(m.text() == "tool execution cancelled" for m in results)
            parts.append("cancellation results" if cancelled else "tool failure results")
        elif len(messages) == rest and all(m.role == "assistant" for m in messages):
            parts.append("model reply")
        elif messages and len(results) == rest:
            parts.append("tool results")
        else:
            parts.append("input")
    return "store " + " + ".join(parts)
