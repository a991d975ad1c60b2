"""The loop's model inside the run workflow: one ``call_model`` activity per model call.

Kept beside its activity (:mod:`.model_activity`), as Pydantic AI keeps ``TemporalModel`` next to
its activity; it talks to the workflow through :class:`~.proxy_host.RunHost` only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..ai.messages import Message
from ..ai.model import ModelEvent, ModelRequest
from ..ai.timefmt import format_time
from .calls import call_activity, workflow_id_new
from .failures import activity_failure, is_cancellation, model_error
from .proxy_host import RunHost
from .types import ModelReply, Stamp

__all__ = ["CANCEL_WINS", "PRODUCER_COMMIT", "ActivityModel"]

PRODUCER_COMMIT = "producer-commit-v1"
"""Patch marker: executions started before it append each reply in a second activity."""
CANCEL_WINS = "cancel-wins-v1"
"""Patch marker: before it, a model call that failed after the run's cancel failed the run."""


class ActivityModel:
    """The loop's model inside the workflow: one ``call_model`` activity per call.

    ``message_start`` is emitted when the call is scheduled (activities do not stream into
    history); the reply arrives whole, with its usage and stop reason.
    """

    def __init__(self, host: RunHost) -> None:
        self.host = host

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelEvent(type="start", partial=Message(role="assistant"))
        host = self.host
        t = host.timeouts
        # the plain model_retry option means the same as in-process: attempts and first backoff
        retry = host.options.get("model_retry") or {}
        attempts = int(retry.get("max_attempts", t.model_max_attempts))
        initial = float(retry.get("initial_interval", t.retry_initial))
        engine = host.engine
        call = host.model_call()
        stamp: Stamp | None = None
        if self.host.patched(PRODUCER_COMMIT):
            # the producer commits its own reply under this header: one activity per turn
            stamp = Stamp(
                id=workflow_id_new(),
                parent_id=engine.leaf_id or None,
                created_at=format_time(workflow.now()),
            )
            call = call.model_copy(update={"stamp": stamp})
        try:
            reply = await call_activity(
                "durable_agent.call_model",
                call,
                ModelReply,
                start_to_close=t.model_start_to_close,
                heartbeat=t.model_heartbeat,
                retry=RetryPolicy(
                    initial_interval=timedelta(seconds=max(initial, 0.01)),
                    maximum_interval=timedelta(seconds=t.retry_max),
                    maximum_attempts=attempts,
                    non_retryable_error_types=["UnknownAgentError", "EntryNotFoundError"],
                ),
                summary=f"model call (turn {engine.turn_count + 1})",
                wait_for_cancel=True,
            )
        except ActivityError as exc:
            if is_cancellation(exc):
                raise asyncio.CancelledError() from exc
            if workflow.cancellation_reason() is not None and self.host.patched(CANCEL_WINS):
                # The user cancelled while the call could not answer (its worker died): the
                # call ends with its heartbeat timeout, but the run ends cancelled (issue 16).
                raise asyncio.CancelledError() from exc
            kind, text = activity_failure(exc)
            if kind == "ModelError":
                raise model_error(exc.cause, text) from exc
            raise
        if reply.cancelled and reply.stored is None:
            # the run is being cancelled: the workflow stores the partial reply on its cancel
            # path, like the in-process engine (no turn_end or agent_end follows)
            host.keep_aborted(reply.message)
            raise asyncio.CancelledError()
        if reply.stored is not None and (
            reply.cancelled or workflow.cancellation_reason() is not None
        ):
            # the run was cancelled while the activity stored the complete reply (the activity
            # may not have heard of it): the reply gets its receipt, then the cancellation
            # proceeds (see the workflow's emit)
            host.defer_cancel()
        if stamp is not None and reply.stored is not None:
            host.producer_committed(stamp.id, reply.stored)
        yield ModelEvent(type="done", partial=reply.message)
