"""What the client's run stream does when following the store was not enough: re-sync the handle
after a broken stream, and name what a failed run may have stored.

A stream that broke (a store read that failed for good) while its run goes on must not free the
handle at a stale leaf — the run keeps appending past it, and a second run would branch from it:
:func:`resync` waits for the run to end, then applies what the run stored, so the handle's log
and leaf match the store again. The same happens when the entries the stream followed are not
the run's own account of them.

A run that ends badly can leave writes in flight: an ``append_entries`` that timed out and
applied later, a ``call_model`` / ``call_tool`` attempt that commits under its stamp after the
run was terminated. Every such write was scheduled with its entry IDs in the activity's input,
so the run's history names them all (:func:`scheduled_entry_ids`); except a local activity's
(the run's store steps), whose input is not recorded: a run that fails after one names its
entries in its failure instead (``activities.failures.unsettled_ids``). The client hands them
to the handle as unsettled; the next run start reconciles them with the store
(docs/design.md#repair-and-reconcile).
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from ..activities.contracts import AppendInput, CallModelInput, CallToolInput
from ..activities.run_contracts import RunResult, RunState
from ..durable.state import SessionState
from ..session.entries import Entry
from ..session.tree import path

__all__ = ["resync", "scheduled_entry_ids"]

logger = logging.getLogger("durable_agent.temporal")

STATE_QUERY_TIMEOUT = 10.0
"""How long a re-sync asks a closed run for its entries before walking the store instead."""


async def resync(
    state: SessionState, handle: WorkflowHandle[Any, RunResult], result: asyncio.Future[RunResult]
) -> None:
    """Wait for the run to end (however it ends), then apply the entries it stored that the
    handle has not, in store order, and move the leaf to the run's last one."""
    await asyncio.wait({result})
    new_ids, leaf = await _run_entries(handle, result)
    try:
        stored = await state.store.load_entries(state.session_id)
    except Exception:
        # the store is down: the next run start adopts the run's entries (reconcile), so it
        # goes on from the run's last one, not from a leaf the run moved past
        state.unsettled.extend(i for i in new_ids or [] if i not in state.index)
        raise
    if new_ids is None:
        new_ids, leaf = _walk(stored, state)
    wanted = set(new_ids)
    missing = [e for e in stored if e.id in wanted and e.id not in state.index]
    if leaf:
        state.apply_receipt(missing, leaf)


async def _run_entries(
    handle: WorkflowHandle[Any, RunResult], result: asyncio.Future[RunResult]
) -> tuple[list[str] | None, str]:
    """The run's new entry IDs and last leaf: from its result, else from its ``state()``."""
    if not result.cancelled() and result.exception() is None:
        done = result.result()
        return list(done.new_entry_ids), done.leaf_id
    exc = None if result.cancelled() else result.exception()
    if exc is not None and not isinstance(exc, WorkflowFailureError):
        logger.debug("re-sync of %s after %r", handle.id, exc)
    try:
        run: RunState = await handle.query(
            "state", result_type=RunState, rpc_timeout=timedelta(seconds=STATE_QUERY_TIMEOUT)
        )
    except Exception as query_error:  # a closed run no worker can replay now, say
        logger.warning("re-sync of %s reads the store instead: %s", handle.id, query_error)
        return None, ""
    return list(run.new_entry_ids), run.leaf_id


def _walk(stored: list[Entry], state: SessionState) -> tuple[list[str], str]:
    """Without the run's own account: the chain below the handle's leaf through entries the
    handle does not hold, as far as it goes unbranched (where it forks, the run's path is
    unknown): the part every such branch's path shares."""
    new = [e for e in stored if e.id not in state.index]
    parents = {e.parent_id for e in new}
    index = {e.id: e for e in stored}
    chains: list[list[str]] = []
    for tip in new:
        if tip.id in parents:
            continue
        ids = [e.id for e in path(index, tip.id)]
        if state.leaf:
            if state.leaf not in ids:
                continue  # a branch elsewhere in the tree
            ids = ids[ids.index(state.leaf) + 1 :]
        if not any(i in state.index for i in ids):
            chains.append(ids)
    shared: list[str] = []
    for column in zip(*chains, strict=False):
        if len(set(column)) > 1:
            break
        shared.append(column[0])
    return shared, shared[-1] if shared else state.leaf


_INPUTS: dict[str, type[Any]] = {
    "durable_agent.append_entries": AppendInput,
    "durable_agent.call_model": CallModelInput,
    "durable_agent.call_tool": CallToolInput,
}


async def scheduled_entry_ids(client: Client, workflow_id: str) -> list[str]:
    """The entry IDs the latest execution of ``workflow_id`` scheduled writes for, in order
    (``[]`` if its history cannot be read: reconciling is then left to stored answers)."""
    ids: list[str] = []
    handle = client.get_workflow_handle(workflow_id)  # the latest run of a continued chain
    try:
        async for event in handle.fetch_history_events():
            if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            attrs = event.activity_task_scheduled_event_attributes
            kind = _INPUTS.get(attrs.activity_type.name)
            if kind is None:
                continue
            [arg] = await client.data_converter.decode(attrs.input.payloads, [kind])
            if isinstance(arg, AppendInput):
                ids.extend(str(json.loads(wire)["id"]) for wire in arg.entries)
            elif arg.stamp is not None:
                ids.append(arg.stamp.id)
    except Exception as exc:  # best effort: a failed read leaves reconcile to stored answers
        logger.warning("could not read the history of %s: %s", workflow_id, exc)
        return []
    return ids
