"""The client stream's two store reads: bodies an event left out, and a re-sync after a break.

Both exist because the client, not the workflow, holds the store for its handle. An
``events(after)`` answer may name stored entries instead of repeating large message bodies
(see ``event_bodies``): :func:`read_bodies` reads them. A stream that broke (a gap, a failed
query or store read) while its run goes on must not free the handle at a stale leaf — the run
keeps appending past it, and a second run would branch from it: :func:`resync` waits for the run
to end, then applies what the run stored, so the handle's log and leaf match the store again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowFailureError, WorkflowHandle

from ..durable.state import SessionState
from ..session.entries import Entry
from .event_bodies import needed_ids
from .types import RunResult, RunState, WireEvent

__all__ = ["read_bodies", "resync"]

logger = logging.getLogger("durable_agent.temporal")

STATE_QUERY_TIMEOUT = 10.0
"""How long a re-sync asks a closed run for its entries before walking the store instead."""


async def read_bodies(state: SessionState, wires: list[WireEvent]) -> dict[str, Entry]:
    """The entries ``wires`` name for the bodies they left out: from the handle's index, and
    from one store read for the rest (entries of this very run the handle has not applied)."""
    ids = needed_ids(wires)
    found = {i: state.index[i] for i in ids if i in state.index}
    if len(found) < len(ids):
        for entry in await state.store.load_entries(state.session_id):
            if entry.id in ids:
                found[entry.id] = entry
    return found


async def resync(
    state: SessionState, handle: WorkflowHandle[Any, RunResult], result: asyncio.Future[RunResult]
) -> None:
    """Wait for the run to end (however it ends), then apply the entries it stored that the
    handle has not, in store order, and move the leaf to the run's last one."""
    await asyncio.wait({result})
    new_ids, leaf = await _run_entries(handle, result)
    stored = await state.store.load_entries(state.session_id)
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
    """Without the run's own account: follow the single-child chain below the handle's leaf
    through entries the handle does not hold (where it forks, the run's path is unknown)."""
    children: dict[str | None, list[Entry]] = {}
    for entry in stored:
        if entry.id not in state.index:
            children.setdefault(entry.parent_id, []).append(entry)
    ids: list[str] = []
    leaf = state.leaf
    while len(children.get(leaf or None, [])) == 1:
        leaf = children[leaf or None][0].id
        ids.append(leaf)
    return ids, leaf
