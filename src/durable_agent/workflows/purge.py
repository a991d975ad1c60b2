"""What Temporal keeps of a deleted session, deleted too: its workflows' histories.

A run's history holds the session's content: its inputs, and every entry an activity returned
(replies, tool results); a compaction's holds its summary. Deleting a session from its store
(docs/design.md#retention) leaves all of it readable in Temporal, in the Web UI above all, until
the namespace's retention drops it. :func:`delete_session_workflows` deletes every execution of
the session's workflows, found by the session's search attribute (runs, compactions and
publishes; each run of a continue-as-new chain), plus the runs the caller names (a run started
within the last second may not be listed yet). The ended ones go at once; a running one is given
``settle`` seconds to end (it is cancelled first: a run stops its calls in flight and ends)
before Temporal terminates it as it deletes it. Temporal deletes in the background: a deleted
run's ID names a new run once it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ..session.ids import validate_session_id
from .executor import run_workflow_id
from .search import SEARCH_ATTRIBUTE

__all__ = ["SETTLE", "delete_session_workflows"]

logger = logging.getLogger("durable_agent.temporal")

SETTLE = 10.0
"""Seconds a running workflow of a deleted session is given to end before it is deleted."""


async def delete_session_workflows(
    client: Client, session_id: str, *, run_ids: Iterable[str] = (), settle: float = SETTLE
) -> int:
    """Delete every workflow execution of ``session_id`` (module doc); the number deleted."""
    query = f'{SEARCH_ATTRIBUTE} = "{validate_session_id(session_id)}"'
    found: dict[tuple[str, str], bool] = {}
    """(workflow ID, run ID) -> running."""
    try:
        async for listed in client.list_workflows(query):
            found[(listed.id, listed.run_id)] = listed.status == WorkflowExecutionStatus.RUNNING
    except RPCError as exc:
        if exc.status != RPCStatusCode.INVALID_ARGUMENT:
            raise
        # no worker registered the search attribute in this namespace yet: nothing has it
    named = {wid for wid, _ in found}
    for run_id in run_ids:
        wid = run_workflow_id(session_id, run_id)
        if wid not in named:
            found[(wid, "")] = True  # not listed yet: its latest execution
    deleted = 0
    for wid, run in [key for key, going in found.items() if not going]:
        deleted += await _delete(client, wid, run)  # the ended ones first: nothing to wait for
    running = [key for key, going in found.items() if going]
    for key in running:  # stopped first: else it goes on with the deleted conversation
        await _cancel(client, *key)
    waits = [asyncio.ensure_future(_ended(client, *key)) for key in running]
    try:
        if waits:
            await asyncio.wait(waits, timeout=settle)
    finally:
        for wait in waits:
            wait.cancel()  # still going after ``settle`` (or this was cancelled): no wait left
    for wid, run in running:
        deleted += await _delete(client, wid, run)
    return deleted


async def _cancel(client: Client, workflow_id: str, run_id: str) -> None:
    """Request the execution's cancellation (a run then stops its calls in flight and ends);
    best effort: one that ended or went meanwhile needs none, and any other is terminated as
    it is deleted."""
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id or None).cancel()
    except RPCError as exc:
        logger.info("cancelling workflow %s of a deleted session: %s", workflow_id, exc)


async def _ended(client: Client, workflow_id: str, run_id: str) -> None:
    with contextlib.suppress(Exception):  # ended in whatever way, or gone: it can go now
        await client.get_workflow_handle(workflow_id, run_id=run_id or None).result()


async def _delete(client: Client, workflow_id: str, run_id: str) -> int:
    request = DeleteWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
    )
    try:
        await client.workflow_service.delete_workflow_execution(request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return 0  # gone already
        raise
    logger.info("deleted workflow %s (%s) of a deleted session", workflow_id, run_id or "latest")
    return 1
