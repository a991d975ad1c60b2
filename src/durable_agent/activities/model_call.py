"""A model call on Temporal: the ``call_model`` activity and the loop's model that schedules it.

The loop in the run workflow holds no history (the workflow never loads the transcript), so its
request is not what the model is sent: :class:`ActivityModel` schedules one ``call_model`` per
call with the header the engine reserved for the reply, and the activity builds the request from
the stored path with ``session.views.run_view``, the formula the in-process loop follows
(docs/design.md#tree-and-views). The reply streams to the live-delta channel, never into workflow
history (docs/design.md#live-deltas); the activity commits the whole reply under the header and
answers the stored entry, which the engine records as the receipt (a model leg is one activity;
docs/design.md#stamps-and-producers). A retry whose header is stored answers that entry without
calling the model again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError
from temporalio.workflow import ActivityCancellationType

from ..agent.approval import needs_approval
from ..agent.options import AgentOptions
from ..ai.messages import Message, with_call_ids
from ..ai.model import ModelError, ModelEvent, ModelRequest
from ..durable.cancel_notes import write_cancel_note
from ..durable.engine import RunEngine, aborted_message
from ..durable.live import DeltaWriter, clear_later, writer_for
from ..durable.persist import Header
from ..session.approvals import ApprovalRequest, requests_for
from ..session.codec import decode_entry
from ..session.deltas import DeltaKey
from ..session.entries import Entry, MessageEntry
from ..session.views import run_view
from .base import ActivityBase, heartbeating, noted_run, producer_answer, run_cancelled
from .contracts import CallModelInput, CancelNoteInput, ModelReply, Timeouts
from .failures import activity_failure, application_error, is_cancellation, model_error
from .spec import AgentSpec
from .stamp_steps import settled_reply

__all__ = ["ActivityModel", "ModelActivity", "note_cancel"]


class ModelActivity(ActivityBase):
    """``durable_agent.call_model``."""

    @activity.defn(name="durable_agent.call_model")
    async def call_model(self, inp: CallModelInput) -> ModelReply:
        """Stream one model reply from the view at the leaf and commit it under the stamp; on
        cancellation (Temporal's, or the run's cancel note) answer what was streamed so far as
        an ``aborted`` message."""
        spec = self.agent_spec(inp.agent)
        options = spec.options(inp.options)
        # one heartbeat schedule for the whole call: a read that is slow under load (seconds
        # on a busy FerretDB) must not outlast the heartbeat timeout either
        async with heartbeating():
            stored = await self.stored_earlier(inp.session_id, inp.stamp, "model call")
            if stored is not None:
                # committed by an earlier attempt (crash between commit and completion, or
                # a zombie that won the race): no second model call
                self.clear_deltas(inp)
                ask = await _asks(options, stored.message)
                return ModelReply(entry=stored, requests=requests_for(stored, ask, inp.run_id))
            request = self._request(options, inp, await self.path_to(inp.session_id, inp.leaf_id))
            final, cancelled, live = await self._stream(spec, inp, request)
            # the reply's last deltas go out while it is committed: a client sees the reply's
            # receipt only after it is stored, and by then both are done
            finishing = None if live is None else asyncio.ensure_future(live.finish(final))
            if cancelled:
                if finishing is not None:
                    await finishing  # best effort and bounded (DeltaWriter.finish)
                return ModelReply(aborted=aborted_message(final))
            # approval rules run here, on the worker, never in workflow code; the requests are
            # stored with the reply in one append (docs/design.md#approvals-and-steering)
            ask = await _asks(options, final)

            def requests(entry: MessageEntry) -> list[ApprovalRequest]:
                return requests_for(entry, ask, inp.run_id)

            write = self.commit(inp.session_id, inp.stamp, final, then=requests)
            commit = asyncio.ensure_future(write)
            try:
                await asyncio.shield(commit)
                # the deltas' last write (no fsync) has usually finished by now: no extra hop
                if finishing is not None and not finishing.done():
                    await asyncio.shield(finishing)
                entry = commit.result()
                return ModelReply(entry=entry, requests=requests(entry))
            except asyncio.CancelledError:
                # the run was cancelled while the reply was being written: a started write
                # completes and gets its receipt before the cancellation proceeds
                entry = await commit
                return ModelReply(entry=entry, cancelled=True, requests=requests(entry))

    @activity.defn(name="durable_agent.note_cancel")
    async def note_cancel(self, inp: CancelNoteInput) -> None:
        """Write the run's cancel note, which stops its calls in flight on every worker within
        a fraction of a second (docs/design.md#cancellation); nothing without a channel."""
        if self.deltas is not None:
            await write_cancel_note(self.deltas, inp.session_id, noted_run(inp.run_id))

    def _request(self, options: AgentOptions, inp: CallModelInput, p: list[Entry]) -> ModelRequest:
        """The model's request: the run's view of path ``p``, its ephemeral inputs included."""
        ephemeral = [decode_entry(w) for w in inp.ephemeral]
        return ModelRequest(
            system_prompt=options.system_prompt,
            messages=run_view(p, inp.start_leaf_id, ephemeral),
            tools=[t.spec for t in options.tools],
            options=dict(options.model_options),
        )

    async def _stream(
        self, spec: AgentSpec, inp: CallModelInput, request: ModelRequest
    ) -> tuple[Message, bool, DeltaWriter | None]:
        """The complete reply (checked against the payload limit), or the partial one a
        cancellation cut short (then ``True``), and the writer whose last deltas the caller
        finishes."""
        partial: Message | None = None
        final: Message | None = None
        cancelled = False
        attempt = activity.info().attempt
        run = (inp.session_id, inp.run_id, inp.turn)
        live = writer_for(self.deltas, *run, attempt, self.live_every, parent=inp.stamp.parent_id)
        watch = self.watching(inp.session_id, inp.run_id)
        try:
            with watch as watched:
                async for event in spec.model.stream(request):
                    partial = event.partial
                    if live is not None:
                        live.offer(partial)
                    if watched is not None:
                        watched.tick()
                    if event.type == "done":
                        final = event.message
        except asyncio.CancelledError:
            if not run_cancelled(watched):
                raise  # the worker shutting down, say: the call is retried elsewhere
            # the reply so far is what the user saw (an empty one stores nothing, but a call
            # the cancel note stopped must answer all the same); it is stored as the reply,
            # so its deltas go after the grace period too, not at a sweep minutes later
            self.clear_deltas(inp)
            return partial or Message(role="assistant"), True, live
        except ModelError as exc:
            self.clear_deltas(inp, unless_retried=exc.retryable)
            policy = activity.info().retry_policy
            longest = policy.maximum_interval if policy else None
            # no cause chain: a provider's own exception may hold the request and its headers
            raise application_error(exc, max_delay=longest) from None
        except Exception as exc:
            # Not a ModelError, so nobody stripped credentials from its message: Temporal gets
            # only its type (the worker's log keeps the rest).
            activity.logger.warning("model call failed with %s", type(exc).__name__, exc_info=True)
            self.clear_deltas(inp)
            raise application_error(
                ModelError(f"model call failed: {type(exc).__name__}", retryable=False)
            ) from None
        finally:
            if live is not None:
                live.stop()
        if final is None:
            raise application_error(
                ModelError("model stream ended without a complete message", retryable=True)
            )
        # the stamp's entry ID seeds the IDs of calls that came without one
        final = with_call_ids(final, inp.stamp.id)
        self.storable(inp.session_id, inp.stamp.on(MessageEntry(message=final)))
        self.check_size("model reply", final.model_dump_json())
        self.clear_deltas(inp)  # after the grace period, when the reply is long stored
        return final, cancelled, live

    def clear_deltas(self, inp: CallModelInput, *, unless_retried: bool = False) -> None:
        """Drop the reply's live deltas after the grace period; ``unless_retried``: only if this
        was the last attempt (a retry's client still reads the same key)."""
        if self.deltas is None or not inp.run_id:
            return
        if unless_retried:
            info = activity.info()
            most = info.retry_policy.maximum_attempts if info.retry_policy else 0
            if most == 0 or info.attempt < most:
                return
        clear_later(self.deltas, DeltaKey(inp.session_id, inp.run_id, inp.turn))


async def _asks(options: AgentOptions, reply: Message) -> list[str]:
    """The reply's calls a person decides first (none for a cut-short reply)."""
    if reply.stop_reason == "aborted":
        return []
    return await needs_approval(reply.tool_calls(), options.tools, options.approval)


class ActivityModel:
    """The loop's model inside the run workflow: one ``call_model`` activity per call.

    ``message_start`` is emitted when the call is scheduled (activities do not stream into
    history); the reply arrives whole, with its usage and stop reason. ``call_input`` builds
    the activity's input around the reply's header (the view's leaf, the run's ephemeral
    inputs, the live-delta key); ``on_cancel`` writes the run's cancel note when the run is
    cancelled during the call; ``model_retry`` is the run's plain option of that name.
    """

    def __init__(
        self,
        engine: RunEngine,
        timeouts: Timeouts,
        call_input: Callable[[Header], CallModelInput],
        on_cancel: Callable[[], Awaitable[None]],
        model_retry: Mapping[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.timeouts = timeouts
        self.call_input = call_input
        self.on_cancel = on_cancel
        self.requests: list[ApprovalRequest] = []
        """The approval requests the last call stored with its reply."""
        # the plain model_retry option means the same as in-process: attempts and first backoff
        retry = model_retry or {}
        self.retry = RetryPolicy(
            initial_interval=timedelta(
                seconds=max(float(retry.get("initial_interval", timeouts.retry_initial)), 0.01)
            ),
            maximum_interval=timedelta(seconds=timeouts.retry_max),
            maximum_attempts=int(retry.get("max_attempts", timeouts.model_max_attempts)),
            non_retryable_error_types=["UnknownAgentError", "EntryNotFoundError"],
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield ModelEvent(type="start", partial=Message(role="assistant"))
        engine, t = self.engine, self.timeouts
        inp = self.call_input(engine.reserve())
        try:
            call = workflow.start_activity_method(
                ModelActivity.call_model,
                inp,
                start_to_close_timeout=timedelta(seconds=t.model_start_to_close),
                heartbeat_timeout=timedelta(seconds=t.model_heartbeat),
                retry_policy=self.retry,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"model call (turn {engine.turn_count + 1})",
            )
            reply = await producer_answer(call, self.on_cancel)
        except ActivityError as exc:
            if is_cancellation(exc) or workflow.cancellation_reason() is not None:
                # cancelled; or the user cancelled while the call could not answer (its worker
                # died): the call ends with its heartbeat timeout, but the run ends cancelled
                raise asyncio.CancelledError() from exc
            reply = await self._given_up(inp, exc)
        if reply.entry is None:
            # cut short by the run's cancellation: the engine stores the partial reply on its
            # cancel path, like in-process (no turn_end or agent_end follows)
            if reply.aborted is not None:
                engine.keep_partial(reply.aborted)
            raise asyncio.CancelledError()
        # a cancellation that arrived while the activity stored the reply (the activity may not
        # have heard of it) proceeds once the reply's receipt is out
        cancelled = reply.cancelled or workflow.cancellation_reason() is not None
        engine.producer_stored(reply.entry, cancelled=cancelled)
        self.requests = list(reply.requests)
        yield ModelEvent(type="done", partial=reply.entry.message)

    async def _given_up(self, inp: CallModelInput, exc: ActivityError) -> ModelReply:
        """The call failed for good: the reply its last attempt stored under the stamp before
        it was given up, with its approval requests, if any (activities.stamp_steps), else the
        failure, raised."""
        stored = await settled_reply(inp.session_id, inp.stamp, self.timeouts)
        if stored is not None:
            return stored
        kind, text = activity_failure(exc)
        if kind == "ModelError":
            raise model_error(exc.cause, text) from exc
        raise exc


async def note_cancel(session_id: str, run_id: str) -> None:
    """Schedule ``note_cancel`` as a local activity (workflow side): best effort and quick; a
    note that cannot be written leaves the calls to Temporal's cancellation (a heartbeat away)."""
    try:
        await workflow.execute_local_activity_method(
            ModelActivity.note_cancel,
            CancelNoteInput(session_id=session_id, run_id=run_id),
            start_to_close_timeout=timedelta(seconds=5),
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary="note the run's cancellation for its calls in flight",
        )
    except FailureError:  # a local activity fails with its bare cause
        workflow.logger.warning("could not write the cancel note of run %s", run_id)
