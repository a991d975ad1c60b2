"""What Temporal says of a run's end, for :class:`~.temporal_runs.TemporalRuns`: its status as
described, the end a follower waits for (through outages), and why a closed run failed, read
from its history (a run this process followed to its end is told as it learnt then:
:class:`~.runs.Failures`)."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from ..activities.run_contracts import RunResult
from ..workflows.executor import run_workflow_id
from ..workflows.outages import through_outages
from ..workflows.run_stream import client_error
from .runs import RunFailure, RunNotFoundError, Status

__all__ = ["FAILURE_TIMEOUT", "described", "description", "ended", "failure_in_history"]

logger = logging.getLogger("durable_agent.server")

FAILURE_TIMEOUT = timedelta(seconds=10)
"""Seconds the read of an ended run's failure from its history may take."""

_STATUS: dict[WorkflowExecutionStatus, Status] = {
    WorkflowExecutionStatus.RUNNING: "started",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "started",
    WorkflowExecutionStatus.CANCELED: "cancelled",
}


async def described(client: Client, session_id: str, run_id: str) -> Status:
    """The run's status from Temporal's description (a waiting run is ``started``)."""
    return (await description(client, session_id, run_id))[0]


async def description(client: Client, session_id: str, run_id: str) -> tuple[Status, str]:
    """:func:`described`, and the ID of the execution described: the run's latest (an
    operator's reset starts another under the run's workflow ID)."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id))
    try:
        found = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None
        raise
    return _STATUS.get(found.status, "failed") if found.status else "started", found.run_id


async def ended(
    client: Client, session_id: str, run_id: str
) -> tuple[Status, RunResult | None, RunFailure | None, str]:
    """Wait for the run's end (a long poll of its result, not billed): how it ended, its result
    if it completed, why and in which execution if it failed. Neither a broken long poll nor
    Temporal out of reach is its end (the run goes on meanwhile): it waits until Temporal says
    how the run ended. An execution that ended while the run goes on (an operator reset it) is
    no end either: its reset execution is waited for."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id), result_type=RunResult)
    what = f"following run {run_id} of {session_id}"
    while True:
        try:
            result = await through_outages(handle.result, what, logger)
        except WorkflowFailureError as exc:
            now = partial(description, client, session_id, run_id)
            status, execution = await through_outages(now, what, logger)
            if status in ("started", "completed"):
                continue  # not this execution's end: the run's latest goes on, or completed
            failure = RunFailure.of(client_error(exc)) if status == "failed" else None
            return status, None, failure, execution
        return "completed", result, None, ""


async def failure_in_history(client: Client, session_id: str, run_id: str) -> RunFailure | None:
    """The closed run's failure as the Temporal executor raises it (a termination or time-out
    says so, with its reason); ``None`` when it cannot be had."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id))
    try:
        await handle.result(rpc_timeout=FAILURE_TIMEOUT)
    except WorkflowFailureError as exc:
        return RunFailure.of(client_error(exc))
    except Exception as exc:  # a run still going, a history gone, Temporal not answering in time
        logger.info("the failure of run %s: %s", run_id, type(exc).__name__)
    return None
