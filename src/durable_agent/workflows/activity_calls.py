"""How workflows call activities: names, timeouts and retry policies suited to LLM work.

Workflows refer to activities by name (no import of the activity module into the sandbox).
Model calls heartbeat, so a crashed worker is noticed within ``heartbeat_timeout``; store writes
retry only while the store is unavailable.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from .types import SEARCH_ATTRIBUTE, Timeouts

__all__ = [
    "KIND_ATTRIBUTE",
    "KIND_KEY",
    "SESSION_ID_KEY",
    "workflow_kind",
    "STORE_NON_RETRYABLE",
    "call_activity",
    "ensure_session_attribute",
    "store_retry",
]

SESSION_ID_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE)

KIND_ATTRIBUTE = "DurableAgentKind"
"""A second Keyword attribute, ``run``, ``compact`` or ``publish``: publish workflows share the
session ID so they stay findable, and ``DurableAgentKind = "run"`` separates the runs from them."""

KIND_KEY = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)
KIND_PATCH = "kind-attribute-v1"


def workflow_kind(workflow_type: str) -> str:
    """``durable_agent.run`` -> ``run`` (the workflow type names carry the kind)."""
    return workflow_type.rsplit(".", 1)[-1]


def ensure_session_attribute(session_id: str) -> None:
    """Set ``DurableAgentSessionId`` and ``DurableAgentKind`` on this workflow unless its starter
    already did (an operator starting a run from the UI or CLI rarely sets search attributes)."""
    info = workflow.info()
    kind = workflow_kind(info.workflow_type)
    attributes = info.typed_search_attributes
    updates: list[SearchAttributeUpdate[str]] = []
    if attributes.get(SESSION_ID_KEY) != session_id:
        updates.append(SESSION_ID_KEY.value_set(session_id))
    # executions started before the kind attribute existed replay without its upsert
    if attributes.get(KIND_KEY) != kind and workflow.patched(KIND_PATCH):
        updates.append(KIND_KEY.value_set(kind))
    if updates:
        workflow.upsert_search_attributes(updates)


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
) -> T:
    """Execute activity ``name`` with the given policy; the summary shows in the Temporal UI."""
    result: T = await workflow.execute_activity(
        name,
        arg,
        result_type=result_type,
        start_to_close_timeout=timedelta(seconds=start_to_close),
        heartbeat_timeout=None if heartbeat is None else timedelta(seconds=heartbeat),
        retry_policy=retry,
        cancellation_type=(
            ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            if wait_for_cancel
            else ActivityCancellationType.TRY_CANCEL
        ),
        summary=summary,
    )
    return result
