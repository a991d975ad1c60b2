"""The search attributes that find a session's workflows: ``DurableAgentSessionId`` (the session)
and ``DurableAgentKind`` (``run``, ``compact`` or ``publish``), both Keyword.

``DurableAgentSessionId = "user-42" AND DurableAgentKind = "run"`` lists a session's runs: publish
workflows share the session ID so they stay findable, and the kind separates the runs from them.
The client sets both when it starts a workflow, every workflow sets them unless its starter did
(an operator starting a run from the UI or CLI rarely does), and the worker registers both if the
namespace lacks them (docs/design.md#temporal).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)
from temporalio.service import RPCError, RPCStatusCode

__all__ = [
    "KIND_ATTRIBUTE",
    "KIND_KEY",
    "SEARCH_ATTRIBUTE",
    "SESSION_ID_KEY",
    "ensure_search_attribute",
    "ensure_session_attribute",
    "running_runs",
    "search_attributes",
    "workflow_kind",
]

SEARCH_ATTRIBUTE = "DurableAgentSessionId"
KIND_ATTRIBUTE = "DurableAgentKind"

SESSION_ID_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE)
KIND_KEY = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)


def workflow_kind(workflow_type: str) -> str:
    """``durable_agent.run`` -> ``run`` (the workflow type names carry the kind)."""
    return workflow_type.rsplit(".", 1)[-1]


def search_attributes(session_id: str, kind: str) -> TypedSearchAttributes:
    """What a client sets on a workflow it starts."""
    return TypedSearchAttributes(
        [SearchAttributePair(SESSION_ID_KEY, session_id), SearchAttributePair(KIND_KEY, kind)]
    )


def ensure_session_attribute(session_id: str) -> None:
    """Set both attributes on this workflow unless its starter already did (workflow code)."""
    info = workflow.info()
    kind = workflow_kind(info.workflow_type)
    attributes = info.typed_search_attributes
    updates: list[SearchAttributeUpdate[str]] = []
    if attributes.get(SESSION_ID_KEY) != session_id:
        updates.append(SESSION_ID_KEY.value_set(session_id))
    if attributes.get(KIND_KEY) != kind:
        updates.append(KIND_KEY.value_set(kind))
    if updates:
        workflow.upsert_search_attributes(updates)


async def ensure_search_attribute(client: Client) -> None:
    """Register both Keyword search attributes if they are missing."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = [
        name for name in (SEARCH_ATTRIBUTE, KIND_ATTRIBUTE) if name not in listed.custom_attributes
    ]
    if not missing:
        return
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={
                    name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing
                },
            )
        )
    except RPCError as exc:  # another worker registered them first
        if exc.status != RPCStatusCode.ALREADY_EXISTS:
            raise


async def running_runs(client: Client, session_id: str) -> list[str]:
    """The run IDs of the session's running runs, whoever started them: listed by the search
    attributes, each confirmed by its description (visibility lags about a second: a run that
    ended a moment ago is still listed, one started a moment ago may not be yet). ``[]`` in a
    namespace where no worker registered the attributes: no run there has them."""
    query = (
        f'{SEARCH_ATTRIBUTE} = "{session_id}" AND {KIND_ATTRIBUTE} = "run" '
        'AND ExecutionStatus = "Running"'
    )
    try:
        listed = [w.id async for w in client.list_workflows(query)]
    except RPCError as exc:
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        return []
    running = []
    for workflow_id in listed:
        try:
            described = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            continue  # deleted since it was listed
        if described.status in (None, WorkflowExecutionStatus.RUNNING):
            running.append(workflow_id.rsplit("/", 1)[-1])  # durable-agent/<session>/run/<id>
    return running
