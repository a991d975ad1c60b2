"""How workflows call activities (:mod:`durable_agent.activities.calls`, re-exported here) and
the search attributes every workflow sets.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from ..activities.calls import STORE_NON_RETRYABLE, call_activity, store_retry
    from .types import SEARCH_ATTRIBUTE

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
