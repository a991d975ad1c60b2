"""What Temporal says of a run's end, for :class:`~.temporal_runs.TemporalRuns`: its status as
described, the end a follower waits for (through outages), and why a closed run failed, read
from its history (a run this process followed to its end is told as it learnt then:
:class:`Ends`)."""

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
from .runs import REMEMBERED, RunFailure, RunNotFoundError, Status

__all__ = ["FAILURE_TIMEOUT", "Ends", "described", "description", "ended", "failure_in_history"]

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
    if it completed, why if it failed, and in which execution. Neither a broken long poll nor
    Temporal out of reach is its end (the run goes on meanwhile): it waits until Temporal says
    how the run ended. An execution that ended while the run goes on (an operator reset it) is
    no end either: its reset execution is waited for."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id), result_type=RunResult)
    what = f"following run {run_id} of {session_id}"
    now = partial(description, client, session_id, run_id)
    while True:
        try:
            result = await through_outages(handle.result, what, logger)
        except WorkflowFailureError as exc:
            status, execution = await through_outages(now, what, logger)
            if status in ("started", "completed"):
                continue  # not this execution's end: the run's latest goes on, or completed
            failure = RunFailure.of(client_error(exc)) if status == "failed" else None
            return status, None, failure, execution
        try:
            status, execution = await through_outages(now, what, logger)
        except RunNotFoundError:  # its session deleted since: it completed all the same
            return "completed", result, None, ""
        if status == "completed":
            return status, result, None, execution
        # else reset since: its latest goes on, or ended otherwise


class Ends:
    """How each run this process followed to its end ended (the last ``REMEMBERED``): the
    execution it ended in, and why it failed as learnt then. A status asked later says why
    without reading it again where a loaded Temporal may not answer in time, and a hub that told
    a run's end tells its retry after an operator's reset, a new execution under the run's
    workflow ID, as it tells a run found going (docs/design.md#http-api)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._of: dict[tuple[str, str], tuple[str, RunFailure | None]] = {}

    def keep(
        self, session_id: str, run_id: str, execution: str, failure: RunFailure | None
    ) -> None:
        self._of.pop((session_id, run_id), None)
        self._of[(session_id, run_id)] = (execution, failure)
        while len(self._of) > REMEMBERED:
            del self._of[next(iter(self._of))]

    def failure(self, session_id: str, run_id: str) -> RunFailure | None:
        return self._of.get((session_id, run_id), ("", None))[1]

    def current(self, session_id: str, run_id: str, execution: str) -> None:
        """Temporal describes ``execution`` as the run's latest: a failure kept of another is
        no longer the run's (an operator reset the run since: README "Operating runs")."""
        ended, failure = self._of.get((session_id, run_id), (execution, None))
        if failure is not None and ended != execution:
            self._of[(session_id, run_id)] = (ended, None)

    def forget(self, session_id: str) -> None:
        """The session was deleted: its run IDs name nothing any more."""
        for key in [k for k in self._of if k[0] == session_id]:
            del self._of[key]

    async def reset(self, session_id: str, run_id: str, listed: str) -> bool:
        """Whether the run, seen ending, was reset since: visibility lists an execution of it
        other than the one that ended (``listed``), and Temporal describes another as the
        run's latest (a listing lags: it may still name an older execution)."""
        ended = self._of.get((session_id, run_id), ("", None))[0]
        if not ended or not listed or listed == ended:
            return False
        try:
            return (await description(self.client, session_id, run_id))[1] != ended
        except Exception as exc:  # an outage, the run deleted: the next look tells
            logger.info("describing run %s: %s", run_id, type(exc).__name__)
            return False


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
