"""The client side of the ``decide`` and ``send`` updates (docs/design.md#approvals-and-steering).

A decision goes to the run that asked (the request names it) through ``decide`` with update ID
``decide:<tool_call_id>:<request entry ID>``: a re-sent decision is one decision, a second
decider gets the first one's entry back, which it reports as :class:`ApprovalNotPendingError`
naming the winner, and a call ID the model uses again in a later turn of the run is another
call (Temporal answers an update ID it has seen with that update's result).
When that run does not wait for the call any more (it parked, ended, or never asked), the handle
commits the decision at its leaf instead (``durable.deciding``). With no worker up (one
SIGKILLed, none started yet) Temporal holds the update until one polls: the library's callers
bound their wait with ``asyncio.timeout``, the HTTP server with :func:`worker_within`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from ..activities.failures import agent_error
from ..durable.approvals import not_pending
from ..durable.errors import AgentError, ApprovalNotPendingError, RunNotAcceptingError
from ..durable.state import SessionState
from ..session.approvals import ApprovalDecision, awaiting_turn
from ..session.codec import decode_entry
from ..session.entries import Entry
from ..session.ids import new_id
from .run_mail import DecideBody, SendBody

__all__ = [
    "TemporalUnavailableError",
    "decide_update",
    "decide_update_id",
    "execute_update",
    "send_update",
    "worker_within",
]


class TemporalUnavailableError(AgentError):
    """Temporal did not answer in time: no worker of the task queue took a decision or a message
    within :func:`worker_within`'s bound (over HTTP a 503, as an outage of Temporal's own: the
    same request sent later is the cure). ``message_id``: the message's, to send it again."""

    message_id: str  # set for a message only


@contextlib.asynccontextmanager
async def worker_within(
    seconds: float | None, what: str, message_id: str = ""
) -> AsyncIterator[None]:
    """The update awaited inside waits at most ``seconds`` (``None``: as long as it takes) for a
    worker to take it, then :class:`TemporalUnavailableError`. Nothing tells sooner that none
    will: a SIGKILLed worker stays among the queue's pollers a minute or more. Temporal keeps
    the update for the next worker, and its ID makes the same one sent again one decision, one
    message (docs/design.md#approvals-and-steering)."""
    bound = asyncio.timeout(seconds)
    try:
        async with bound:
            yield
    except TimeoutError:
        if not bound.expired():
            raise
        again = f" with message_id {message_id!r}" if message_id else ""
        error = TemporalUnavailableError(
            f"no worker has taken the {what} yet: it may still be delivered when a worker polls "
            f"the task queue; sending it again{again} is safe (one {what}, however often sent)"
        )
        if message_id:
            error.message_id = message_id
        raise error from None


async def execute_update(
    handle: WorkflowHandle[Any, Any], name: str, body: object, update_id: str
) -> str:
    """The update's answer. Cancelled while it waits (no worker takes it: Ctrl-C, a caller's
    timeout), the SDK raises its own ``WorkflowUpdateRPCTimeoutOrCancelledError`` in place of
    the cancellation, which ``asyncio.timeout``/``wait_for`` then do not see as theirs and
    ``asyncio.run`` reports as a crash: the cancellation is raised again as itself."""
    try:
        answer: str = await handle.execute_update(name, body, id=update_id, result_type=str)
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise
    return answer


def _refusal(exc: WorkflowUpdateFailedError) -> BaseException:
    cause = exc.cause
    return agent_error(cause) if isinstance(cause, ApplicationError) else exc


async def send_update(handle: WorkflowHandle[Any, Any], body: SendBody) -> Entry:
    """``stream.send`` on Temporal: the ``send`` update, answered once the run delivered it."""
    message_id = new_id()
    body = body.model_copy(update={"message_id": message_id})
    try:
        wire = await execute_update(handle, "send", body, message_id)
    except WorkflowUpdateFailedError as exc:
        raise _refusal(exc) from exc
    except RPCError as exc:
        raise RunNotAcceptingError(f"the run takes no more messages: {exc}") from exc
    return decode_entry(wire)


async def decide_update(
    run_handle: Callable[[str], WorkflowHandle[Any, Any]],
    state: SessionState,
    decision: ApprovalDecision,
) -> Entry | None:
    """Hand ``decision`` to the run that asked; ``None`` when that run does not wait for it."""
    turn = awaiting_turn(state.path())
    request = None if turn is None else turn.requests.get(decision.tool_call_id)
    if request is None:
        return None
    # the handle's live run first (it waits on the turn it started on), else the run that asked
    for run_id in dict.fromkeys(i for i in (state.live_run_id, request.run_id) if i):
        entry = await _ask(run_handle(run_id), decision, request.id)
        if entry is not None:
            return entry
    return None


def decide_update_id(tool_call_id: str, request_id: str) -> str:
    """The ID a client's ``decide`` update for the call of request ``request_id`` goes under."""
    return f"decide:{tool_call_id}:{request_id}"


async def _ask(
    handle: WorkflowHandle[Any, Any], decision: ApprovalDecision, request_id: str
) -> Entry | None:
    body = DecideBody(
        tool_call_id=decision.tool_call_id,
        approved=decision.approved,
        reason=decision.reason,
        args=decision.args,
        decided_by=decision.decided_by,
        request_id=request_id,
    )
    try:
        update_id = decide_update_id(decision.tool_call_id, request_id)
        wire = await execute_update(handle, "decide", body, update_id)
    except WorkflowUpdateFailedError as exc:
        error = _refusal(exc)
        if isinstance(error, ApprovalNotPendingError) and "already decided" in str(error):
            raise error from exc
        return None  # the run does not wait for it (parked, ending, ended)
    except RPCError:
        return None  # no such run any more
    entry = decode_entry(wire)
    if isinstance(entry, ApprovalDecision) and not entry.same_decision(decision):
        raise not_pending(decision.tool_call_id, entry.id)  # another decider won
    return entry
