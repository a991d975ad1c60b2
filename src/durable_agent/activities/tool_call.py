"""A tool call on Temporal: the ``call_tool`` activity and the loop's tool executor that
schedules it.

Failures are retried per the tool's own policy by Temporal; the run answers a call the retries
gave up on with ``tool execution failed: …`` (docs/design.md#repair-and-reconcile).

**Who commits a result** (docs/design.md#stamps-and-producers). A call that runs alone (a turn's
only call, or one of a turn's sequential calls) gets the header the engine reserves for the next
entry, and ``call_tool`` commits its result under it (on a retry a stored result is answered and
the tool never runs again), so the tool leg is one activity. A turn's *parallel* calls get no
header: once all of them finished, their results are committed in **one** append, chained in
call order (:meth:`RunEngine.commit_batch`), and the engine records them one receipt each.
Producers committing concurrently would land in completion order, while a resume starts from the
last entry in append order and results chain in call order: a reopened handle (or a run
terminated mid-batch) would resume from the wrong result, or from a chain with a hole. A crash
mid-batch loses nothing either: the finished calls' results are in the workflow's history and do
not run again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

from ..agent.tool_exec import failure_text, unknown_tool_result
from ..ai.messages import (
    Message,
    ToolCall,
    encodable_text,
    error_tool_result_message,
    tool_result_message,
)
from ..ai.redaction import configured_secrets, redact
from ..ai.tools import RetryPolicy as ToolRetry
from ..ai.tools import Tool, ToolContext
from ..durable.engine import RunEngine
from ..durable.errors import PayloadTooLargeError
from ..durable.limits import as_stored
from ..durable.persist import Header
from ..session.entries import MessageEntry
from ..session.errors import EntryTooLargeError
from .base import ActivityBase, heartbeating, is_retry, producer_answer
from .contracts import CallToolInput, Timeouts, ToolInfo, ToolReply
from .failures import PAYLOAD_TOO_LARGE, activity_failure, is_cancellation
from .spec import AgentSpec
from .stamp_steps import settle_stamp

__all__ = ["ActivityTools", "ToolActivity", "tool_descriptor", "tool_retry"]


class ToolActivity(ActivityBase):
    """``durable_agent.call_tool``."""

    @activity.defn(name="durable_agent.call_tool")
    async def call_tool(self, inp: CallToolInput) -> ToolReply:
        """Run one tool call with the worker's handler; with a stamp, commit its result under
        it (a conflicting earlier write wins), and on a retry answer a result already stored
        under it without running the tool again. The run's cancel note stops the tool."""
        spec = self.agent_spec(inp.agent)
        call = ToolCall.model_validate(inp.call)
        async with heartbeating():  # one schedule for the whole call (a slow read included)
            if inp.stamp is not None and is_retry():
                stored = await self.stored_earlier(inp.session_id, inp.stamp, "tool call")
                if stored is not None:
                    return ToolReply(entry=stored)  # a stored result's tool never runs again
            watch = self.watching(inp.session_id, inp.run_id)
            try:
                with watch as watched:
                    result = await self.run_tool(spec, call)
            except asyncio.CancelledError:
                if watched is None or not watched.fired:
                    raise  # Temporal's cancellation: the call ends cancelled
                return ToolReply(cancelled=True)  # the run's cancel note: the run answers it
            if inp.stamp is None:
                return ToolReply(result=result)
            commit = asyncio.ensure_future(self.commit_result(inp.session_id, inp.stamp, result))
            try:
                return ToolReply(entry=await asyncio.shield(commit))
            except asyncio.CancelledError:
                # cancelled while the result was being written: a started write completes and
                # the run (waiting for this attempt) records it first
                return ToolReply(entry=await commit)

    async def commit_result(self, session_id: str, stamp: Header, result: Message) -> MessageEntry:
        """Commit a tool result under its stamp; one the store refuses as too large is answered
        ``tool execution failed: EntryTooLargeError: …`` under the same stamp (the call is never
        left dangling; the same stand-in the engine stores in process)."""
        try:
            return await self.commit(session_id, stamp, result, "tool result")
        except ApplicationError as exc:
            refused = exc.__cause__
            if not isinstance(refused, EntryTooLargeError):
                raise
        stand_in = error_tool_result_message(
            result.tool_call_id or "",
            result.tool_name or "",
            failure_text(refused),
            timestamp=result.timestamp,
        )
        return await self.commit(session_id, stamp, stand_in, "tool result")

    async def run_tool(self, spec: AgentSpec, call: ToolCall) -> Message:
        tool = spec.tool(call.name)
        if tool is None:
            return unknown_tool_result(call)

        async def report(partial: str) -> None:
            activity.heartbeat(encodable_text(partial[:1000]))

        ctx = ToolContext(tool_call_id=call.id, tool_name=call.name, report=report)
        try:
            blocks = await tool.invoke(call.arguments, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            non_retryable = type(exc).__name__ in tool.retry.non_retryable
            # the message becomes the result text; the chain stays on the worker. A client
            # library's error may carry the worker's credential (a URL's key, a header), so it
            # is redacted as a model error is (docs/design.md#errors).
            message = redact(encodable_text(str(exc)), configured_secrets(os.environ))
            raise ApplicationError(  # (a message Temporal cannot encode fails the activity task)
                message, type=type(exc).__name__, non_retryable=non_retryable
            ) from None
        result = tool_result_message(call.id, call.name, *blocks)
        # a parallel call's result travels bare and is stamped by the run: measured with its header
        self.check_size(f"result of tool {call.name!r}", as_stored(MessageEntry(message=result)))
        return result


class _NoArgs(BaseModel):
    pass


async def _remote(**_: Any) -> str:  # pragma: no cover - never called: tools run in activities
    raise RuntimeError("worker tools run in the call_tool activity")


def tool_descriptor(info: ToolInfo) -> Tool:
    """A stand-in Tool carrying what the loop needs to schedule calls (name, parallelism)."""
    return Tool(
        name=info.name,
        description="",
        args_model=_NoArgs,
        handler=_remote,
        parallel_safe=info.parallel_safe,
        retry=ToolRetry(
            max_attempts=info.max_attempts,
            initial_interval=info.initial_interval,
            backoff=info.backoff,
            max_interval=info.max_interval,
            non_retryable=tuple(info.non_retryable),
        ),
        timeout=info.timeout,
    )


def tool_retry(info: ToolInfo, t: Timeouts) -> RetryPolicy:
    """The tool's own retry policy (attempts, backoff); a crashed worker is noticed by the
    heartbeat timeout, as for model calls."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=info.initial_interval),
        backoff_coefficient=info.backoff,
        maximum_interval=timedelta(seconds=max(info.max_interval, 1.0)),
        maximum_attempts=info.max_attempts,
        non_retryable_error_types=[*info.non_retryable, PAYLOAD_TOO_LARGE],
    )


class ActivityTools:
    """Runs each tool call as a ``call_tool`` activity with the tool's own retry policy; a call
    the retries give up on is answered with ``tool execution failed: …``. See the module
    docstring for who commits which result.

    ``too_large`` is the first tool result over the payload limit: its call is answered like
    any failed call, and the run fails with it at the end of the turn.
    """

    def __init__(
        self,
        engine: RunEngine,
        session_id: str,
        agent: str,
        tools: dict[str, ToolInfo],
        timeouts: Timeouts,
        *,
        run_id: str = "",
        on_cancel: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.engine = engine
        self.session_id = session_id
        self.run_id = run_id
        self.on_cancel = on_cancel
        """Writes the run's cancel note when the run is cancelled during a call."""
        self.agent = agent
        self.tools = tools
        self.timeouts = timeouts
        self.too_large: PayloadTooLargeError | None = None
        self._finished: dict[str, Message] = {}
        """Results of this turn's parallel calls, by call ID, until the batch is committed."""
        self._turn: tuple[list[ToolCall], bool] = ([], False)

    def plan_turn(self, calls: list[ToolCall], parallel: bool) -> None:
        """The calls the loop runs in this turn and whether at once: its own rule, on its own
        calls (a turn resumed after a wait for people runs only those still unanswered, its
        reply stored by an earlier run)."""
        self._turn = (list(calls), parallel)

    async def execute(
        self, tool: Tool | None, call: ToolCall, report: Callable[[str], Awaitable[None]]
    ) -> Message:
        calls, parallel = self._turn
        if call.id not in {c.id for c in calls}:  # run outside a turn: alone
            calls, parallel = [call], False
        stamp = None if parallel else self.engine.reserve()
        info = self.tools.get(call.name) or ToolInfo(name=call.name, max_attempts=1)
        inp = CallToolInput(
            session_id=self.session_id,
            agent=self.agent,
            call=call.model_dump(mode="json"),
            stamp=stamp,
            run_id=self.run_id,
        )
        try:
            reply = await self._call(info, inp)
        except ActivityError as exc:
            if is_cancellation(exc):
                raise asyncio.CancelledError() from exc
            kind, text = activity_failure(exc)
            if kind == "UnknownAgentError":
                # this worker lacks the run's agent (a deploy renamed it): the tool never ran,
                # so its call is left unanswered and the run fails, as its next model call
                # would; a decided call is carried out by the next run (docs/design.md#deploys)
                raise
            if kind == PAYLOAD_TOO_LARGE and self.too_large is None:
                self.too_large = PayloadTooLargeError(text)
            message = f"tool execution failed: {kind}: {text}"
            result = error_tool_result_message(
                call.id, call.name, message, timestamp=workflow.now()
            )
            if stamp is not None:
                return await self._settled(stamp, result)
        else:
            if reply.cancelled:
                raise asyncio.CancelledError()  # the cancel note stopped it: the run answers it
            if reply.entry is not None:
                # recorded first if the run is being cancelled: the loop may be unwinding
                # already, and then the engine's cancellation records it (no cancelled sibling)
                cancelled = workflow.cancellation_reason() is not None
                self.engine.producer_stored(reply.entry, cancelled=cancelled)
                return reply.entry.message
            assert reply.result is not None
            result = reply.result
        if parallel:
            await self._batch(calls, call.id, result)
        return result

    async def _settled(self, stamp: Header, failure: Message) -> Message:
        """A call that runs alone and that the retries gave up on: its failure result is stored
        under the call's stamp, unless its last attempt stored the real result there first,
        which then answers the call (activities.stamp_steps)."""
        stored = await settle_stamp(self.session_id, stamp, failure, self.timeouts)
        cancelled = workflow.cancellation_reason() is not None
        self.engine.producer_stored(stored, cancelled=cancelled)
        return stored.message

    async def _call(self, info: ToolInfo, inp: CallToolInput) -> ToolReply:
        """Schedule ``call_tool``; a stamped call waits for the outcome of its cancellation, so
        a result stored meanwhile gets its receipt instead of a cancelled sibling."""
        t = self.timeouts
        options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=info.timeout),
            "heartbeat_timeout": timedelta(seconds=t.tool_heartbeat),
            "retry_policy": tool_retry(info, t),
            "summary": f"tool {info.name}" + (" (stores its result)" if inp.stamp else ""),
        }
        if inp.stamp is None:
            try:
                reply: ToolReply = await workflow.execute_activity_method(
                    ToolActivity.call_tool, inp, **options
                )
            except asyncio.CancelledError:
                if self.on_cancel is not None:
                    await self.on_cancel()  # the batch's other calls stop too
                raise
            return reply
        cancellation = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        handle = workflow.start_activity_method(
            ToolActivity.call_tool, inp, cancellation_type=cancellation, **options
        )
        return await producer_answer(handle, self.on_cancel)

    async def _batch(self, calls: list[ToolCall], call_id: str, result: Message) -> None:
        """Keep a parallel call's result; the last of the turn commits them all, in call order
        (call IDs that repeat are left to one commit each)."""
        self._finished[call_id] = result
        ids = [c.id for c in calls]
        if len(set(ids)) == len(ids) and all(i in self._finished for i in ids):
            await self.engine.commit_batch([self._finished.pop(i) for i in ids])
