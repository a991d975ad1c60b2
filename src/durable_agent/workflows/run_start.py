"""Where a run starts in its session, as the client that follows it needs to know
(docs/design.md#receipts): the starting leaf, the IDs of its durable inputs (the client chose
them), how many run-start repairs it stores ahead of them, and a seq before its first entry.

A client that starts the run knows all of it (:func:`started_here`). A client that attaches to a
run already started (``agent.run(..., run_id=<a started run>)``) reads it from the run's first
execution's history (:func:`attached`): its input names the leaf (or, for an operator's run
without one, the ``ensure_session`` step recorded it) and the inputs' IDs; it follows the
session from its first entry.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from ..activities.run_contracts import InputEntry, RunInput
from ..activities.start_leaf import input_id, local_activity_result
from ..durable.persist import is_durable
from ..durable.state import SessionState
from ..session.approvals import AwaitingTurn, awaiting_turn, run_start_repairs
from ..session.entries import Entry
from ..session.tree import path as tree_path
from .run_input import decode_run_input

__all__ = ["RunStart", "attached", "started_agent", "started_here"]


@dataclass(frozen=True)
class RunStart:
    """Where a run starts in its session, as its client follows it: the starting leaf, its
    durable inputs' IDs (``None`` for one the run names itself), the run-start repairs it
    stores first, and a seq before its first entry."""

    leaf: str
    inputs: list[str | None]
    repairs: int
    after: int
    waiting: AwaitingTurn | None = None
    """A run with no input on a turn whose calls wait for people: it waits on that turn."""
    born: datetime | None = None
    """The session record's ``created_at`` as its start read it (``None``: not read): the
    follower's first read need not read the record again."""


def started_here(state: SessionState, inputs: list[InputEntry]) -> RunStart:
    """A run this client starts now from the handle's leaf with ``inputs``."""
    durable = sum(1 for e in state.log if is_durable(e))  # at most the store's count: a seq
    ids: list[str | None] = [input_id(item) for item in inputs if not item.ephemeral]
    path = state.path()
    return RunStart(
        leaf=state.leaf,
        inputs=ids,
        repairs=len(run_start_repairs(path)),
        after=durable,
        waiting=None if inputs else awaiting_turn(path),
    )


async def _first_history(client: Client, workflow_id: str) -> AsyncIterator[HistoryEvent]:
    """The events of the run's first execution (its input is there, not in a continuation's)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    first = description.raw_description.workflow_execution_info.first_run_id or None
    async for event in client.get_workflow_handle(workflow_id, run_id=first).fetch_history_events():
        yield event


async def _input(client: Client, event: HistoryEvent) -> RunInput:
    payloads = event.workflow_execution_started_event_attributes.input.payloads
    [value] = await client.data_converter.decode(payloads)
    return decode_run_input(value)


async def started_agent(client: Client, workflow_id: str) -> str | None:
    """The agent the run was started with, so that what goes on after it parked (``approve``)
    is that agent's; ``None`` when Temporal no longer holds the run."""
    with contextlib.suppress(RPCError):
        async for event in _first_history(client, workflow_id):
            return (await _input(client, event)).agent  # the first event: its start
    return None


async def attached(
    client: Client, handle: WorkflowHandle[Any, Any], state: SessionState
) -> RunStart:
    """A run started elsewhere: read from its first execution's history (module doc)."""
    leaf: str | None = None
    inputs: list[str | None] = []
    async for event in _first_history(client, handle.id):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            inp = await _input(client, event)
            leaf = inp.leaf_id
            inputs = [input_id(item) for item in inp.inputs if not item.ephemeral]
            if leaf is not None:
                break
            continue
        recorded = local_activity_result(event, "durable_agent.ensure_session")
        if recorded:
            [leaf] = await client.data_converter.decode(recorded, [str])
            break
    leaf = leaf or ""
    path = await _path(state, leaf)
    waiting = None if inputs else awaiting_turn(path)
    return RunStart(
        leaf=leaf, inputs=inputs, repairs=len(run_start_repairs(path)), after=0, waiting=waiting
    )


async def _path(state: SessionState, leaf: str) -> list[Entry]:
    """The path to ``leaf``, where the run computes its repairs and what waits for people."""
    index: dict[str, Entry] = state.index
    if leaf and leaf not in index:
        index = {e.id: e for e in await state.store.load_entries(state.session_id)}
    return tree_path(index, leaf)
