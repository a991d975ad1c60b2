"""The search attributes that find a session's workflows: ``DurableAgentSessionId`` (the session)
and ``DurableAgentKind`` (``run``, ``compact`` or ``publish``), both Keyword.

``DurableAgentSessionId = "user-42" AND DurableAgentKind = "run"`` lists a session's runs: publish
workflows share the session ID so they stay findable, and the kind separates the runs from them.
The client sets both when it starts a workflow, every workflow sets them unless its starter did
(an operator starting a run from the UI or CLI rarely does), and the worker registers both if the
namespace lacks them (docs/design.md#temporal).

A run's memo ``session_created_at`` (the session record's ``created_at``, ISO text) names the
creation of the session ID the run belongs to: a run of a session deleted without its workflows
is no run of the session created again under the ID (docs/design.md#retention). The client that
starts a run on an existing session sets it; a run started without it (by hand, or on a session
it creates) sets it itself from its first store step's read of the record
(:func:`creation_unnamed`, :func:`name_creation`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)
from temporalio.service import RPCError, RPCStatusCode

from ..session.errors import InvalidSessionIdError
from ..session.ids import validate_session_id
from ..session.store import RetentionStore, Store, created_at_of

__all__ = [
    "CREATED_MEMO",
    "NO_SESSION",
    "KIND_ATTRIBUTE",
    "KIND_KEY",
    "SEARCH_ATTRIBUTE",
    "SESSION_ID_KEY",
    "TRANSIENT",
    "ensure_search_attribute",
    "Creation",
    "created_at_of",
    "creation_of",
    "creation_unnamed",
    "creation_when_asked",
    "ended_runs",
    "latest_runs",
    "ensure_refused_attributes",
    "ensure_session_attribute",
    "name_creation",
    "run_memo",
    "retried",
    "running_executions",
    "running_runs",
    "search_attributes",
    "workflow_kind",
]

SEARCH_ATTRIBUTE = "DurableAgentSessionId"
KIND_ATTRIBUTE = "DurableAgentKind"

SESSION_ID_KEY = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE)
KIND_KEY = SearchAttributeKey.for_keyword(KIND_ATTRIBUTE)

CREATED_MEMO = "session_created_at"
RUN_PREFIX = "durable-agent/"
"""How a run's workflow ID starts (``durable-agent/<session>/run/<run>``: run_workflow_id)."""

NO_SESSION = datetime.min.replace(tzinfo=UTC)
"""The creation :func:`creation_of` names for an ID no session holds: no run's memo names it."""


def workflow_kind(workflow_type: str) -> str:
    """``durable_agent.run`` -> ``run`` (the workflow type names carry the kind)."""
    return workflow_type.rsplit(".", 1)[-1]


def search_attributes(session_id: str, kind: str) -> TypedSearchAttributes:
    """What a client sets on a workflow it starts."""
    return TypedSearchAttributes(
        [SearchAttributePair(SESSION_ID_KEY, session_id), SearchAttributePair(KIND_KEY, kind)]
    )


def run_memo(created_at: datetime | None) -> dict[str, str] | None:
    """What a client sets as the memo of a run it starts in the session created at
    ``created_at`` (``None``: a session the run creates, which then sets it itself, or a store
    without records)."""
    return None if created_at is None else {CREATED_MEMO: created_at.isoformat()}


async def creation_of(store: Store, session_id: str) -> datetime | None:
    """The ``created_at`` a busy check gives :func:`running_runs`: the session record's; for an
    ID no session holds (deleted, not created again yet) :data:`NO_SESSION`, so the runs started
    with the memo, a deleted session's, are none of the one a run creates under the ID (those
    without it count); ``None`` for a store without records."""
    born = await created_at_of(store, session_id)
    return NO_SESSION if born is None and isinstance(store, RetentionStore) else born


Creation = Callable[[], Awaitable[datetime | None]]


def creation_when_asked(store: Store, session_id: str) -> Creation:
    """:func:`creation_of`, read at the first call and kept: a busy check that finds no run
    naming a creation reads no record (most find none)."""
    read: list[datetime | None] = []

    async def creation() -> datetime | None:
        if not read:
            read.append(await creation_of(store, session_id))
        return read[0]

    return creation


def creation_unnamed() -> bool:
    """Whether this run's memo lacks :data:`CREATED_MEMO` (workflow code): its starter did not
    know the creation (a run that creates its session, an operator's start)."""
    return workflow.memo_value(CREATED_MEMO, None) is None


def name_creation(created_at: str | None) -> None:
    """Set :data:`CREATED_MEMO` on this run (workflow code) to ``created_at``, the record's as
    its store step read it when :func:`creation_unnamed` asked for it (``None``: not asked, or
    a store without records; nothing to set)."""
    if created_at is not None:
        workflow.upsert_memo({CREATED_MEMO: created_at})


def run_named(workflow_id: str, kind: str = "run") -> tuple[str, str] | None:
    """The session and run a run's workflow ID ``durable-agent/<session>/run/<run>`` names (or
    the session and operation of another ``kind``'s: ``.../compact/<op>``)."""
    session, part, tail = workflow_id.removeprefix(RUN_PREFIX).partition(f"/{kind}/")
    return (session, tail) if workflow_id.startswith(RUN_PREFIX) and part and tail else None


def ensure_refused_attributes(named: Any = None) -> None:
    """Set both attributes on a run or compaction whose input was refused (workflow code), so an
    operator finds its failure by the session: the session ID its input named (``named``) if
    valid, else the one its workflow ID ``durable-agent/<session>/<kind>/<id>`` names, if any."""
    info = workflow.info()
    by_id = (run_named(info.workflow_id, workflow_kind(info.workflow_type)) or (None,))[0]
    for candidate in (named, by_id):
        try:
            ensure_session_attribute(validate_session_id(candidate))
        except InvalidSessionIdError:
            continue
        return


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


_T = TypeVar("_T")

TRANSIENT = frozenset(
    {RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED}
)
"""What a loaded server answers now and then and not the next time."""


async def retried(call: Callable[[], Awaitable[_T]], attempts: int = 5, pause: float = 0.1) -> _T:
    """``call()``, again after a :data:`TRANSIENT` refusal (``pause`` doubling each time): a
    worker must not fail to start, nor a run start or busy check fail, because a busy server
    cancelled one read (only reads and registrations, safe to send again, go through it)."""
    for attempt in range(attempts - 1):
        try:
            return await call()
        except RPCError as exc:
            if exc.status not in TRANSIENT:
                raise
        await asyncio.sleep(pause * 2**attempt)
    return await call()


async def ensure_search_attribute(client: Client) -> None:
    """Register both Keyword search attributes if they are missing (each call
    :func:`retried`: both are safe to send again)."""
    request = ListSearchAttributesRequest(namespace=client.namespace)
    listed = await retried(lambda: client.operator_service.list_search_attributes(request))
    missing = [
        name for name in (SEARCH_ATTRIBUTE, KIND_ATTRIBUTE) if name not in listed.custom_attributes
    ]
    if not missing:
        return
    adding = AddSearchAttributesRequest(
        namespace=client.namespace,
        search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing},
    )
    try:
        await retried(lambda: client.operator_service.add_search_attributes(adding))
    except RPCError as exc:  # another worker registered them first
        if exc.status != RPCStatusCode.ALREADY_EXISTS:
            raise


async def running_runs(
    client: Client, session_id: str, created_at: datetime | Creation | None = None
) -> list[str]:
    """The run IDs of :func:`running_executions`."""
    return list(await running_executions(client, session_id, created_at))


async def running_executions(
    client: Client, session_id: str, created_at: datetime | Creation | None = None
) -> dict[str, str]:
    """The run IDs of the session's running runs, whoever started them, each with the ID of
    its execution going (an operator's reset starts another): listed by the search
    attributes, each confirmed by its description (visibility lags about a second: a run that
    ended a moment ago is still listed, one started a moment ago may not be yet). ``[]`` in a
    namespace where no worker registered the attributes: no run there has them.
    ``created_at``, the session record's (or how to read it, once a run names a creation): runs
    whose memo names another creation of the ID are left out (one without the memo counts)."""
    query = (
        f'{SEARCH_ATTRIBUTE} = "{session_id}" AND {KIND_ATTRIBUTE} = "run" '
        'AND ExecutionStatus = "Running"'
    )
    try:
        listed = await retried(lambda: _listed(client, query))
    except RPCError as exc:
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        return {}
    running = {}
    for execution in listed:
        if created_at is not None and not await _of_creation(execution, created_at):
            continue
        handle = client.get_workflow_handle(execution.id)
        try:
            described = await retried(handle.describe)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            continue  # deleted since it was listed
        if described.status in (None, WorkflowExecutionStatus.RUNNING):
            running[execution.id.rsplit("/", 1)[-1]] = described.run_id  # .../run/<id>
    return running


async def ended_runs(
    client: Client, session_id: str, since: datetime, created_at: datetime | Creation | None
) -> list[tuple[str, str]]:
    """The run IDs of the session's runs that ended at ``since`` or after (Temporal's clock),
    each with the ID of the execution that ended (a run reset since is listed once for each),
    but those whose memo names another creation of the ID than ``created_at``: a run over
    before visibility listed it running (a second or so) is found ended instead."""
    stamp = since.astimezone(UTC).isoformat().replace("+00:00", "Z")
    query = (
        f'{SEARCH_ATTRIBUTE} = "{session_id}" AND {KIND_ATTRIBUTE} = "run" '
        f'AND ExecutionStatus != "Running" AND CloseTime >= "{stamp}"'
    )
    try:
        listed = await retried(lambda: _listed(client, query))
    except RPCError as exc:
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        return []  # no worker registered the attributes: no run has them
    return [
        (w.id.rsplit("/", 1)[-1], w.run_id)
        for w in listed
        if created_at is None or await _of_creation(w, created_at)
    ]


async def latest_runs(
    client: Client, session_id: str, created_at: datetime | None, limit: int
) -> list[str]:
    """The run IDs of the session's latest ``limit`` runs, going or ended, but those whose memo
    names another creation of the ID than ``created_at`` (the record's; ``None``: every run):
    a session deleted since and its runs took none of this one's messages
    (docs/design.md#retention)."""
    query = f'{SEARCH_ATTRIBUTE} = "{session_id}" AND {KIND_ATTRIBUTE} = "run"'
    listed = await retried(lambda: _listed(client, query, limit))
    return [
        w.id.rsplit("/", 1)[-1]
        for w in listed
        if created_at is None or await _of_creation(w, created_at)
    ]


async def _listed(client: Client, query: str, limit: int | None = None) -> list[WorkflowExecution]:
    return [w async for w in client.list_workflows(query, limit=limit)]


async def _of_creation(execution: WorkflowExecution, created_at: datetime | Creation) -> bool:
    """Whether the run belongs to the session's creation at ``created_at`` (by its memo)."""
    named = await execution.memo_value(CREATED_MEMO, None)
    if not isinstance(named, str):
        return True  # before its first store step named it, or one unreadable: as before
    try:
        named_at = datetime.fromisoformat(named)
    except ValueError:
        return True
    wanted = created_at if isinstance(created_at, datetime) else await created_at()
    return wanted is None or named_at == wanted  # None: a store without records, no filter
