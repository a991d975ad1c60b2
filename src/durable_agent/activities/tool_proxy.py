"""The loop's tool executor inside the run workflow: one ``call_tool`` activity per call.

Kept beside its activity (:mod:`.tool_activity`), as the model proxy is; it talks to the
workflow through :class:`~.proxy_host.RunHost` only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..ai.messages import Message, ToolCall, error_tool_result_message
from ..ai.timefmt import format_time
from ..ai.tools import RetryPolicy as ToolRetry
from ..ai.tools import Tool
from ..durable.errors import PayloadTooLargeError
from ..session.entries import Entry, MessageEntry
from .calls import call_activity, workflow_id_new
from .failures import PAYLOAD_TOO_LARGE, activity_failure, is_cancellation
from .proxy_host import RunHost
from .types import CallToolInput, Stamp, StoredTimes, Timeouts, ToolInfo, ToolReply

__all__ = ["TOOL_COMMIT", "TOOL_LANDED", "ActivityTools", "tool_descriptor", "tool_retry"]

TOOL_COMMIT = "tool-commit-v1"
"""Patch marker: executions started before it append every tool result in a second activity."""
TOOL_LANDED = "tool-landed-on-cancel-v1"
"""Patch marker: before it, a stamped tool result that arrived during the run's cancellation
got a ``cancelled`` sibling; recorded only in runs cancelled in that window."""


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
    the retries give up on is answered with ``tool execution failed: …`` (SPEC §5.3).

    **Who commits a result** (issue 10 item 2). A call that runs alone (a turn's only call, or
    one of a turn's sequential calls) gets a stamp, parent = the current leaf, and ``call_tool``
    commits its result under it (stamp-first lookup: a result that is stored never runs again),
    so the tool leg costs one activity. A turn's *parallel* calls get no stamp: their results
    are committed in **one batch** (one ``append_entries``, chained in call order) once all of
    them finished, and the engine records them one receipt each.
    Producers committing concurrently would land in completion order, and SPEC §2.1 resumes from
    the **last entry in append order** while §4.4 chains results **in call order**: a reopened
    handle (or a run terminated mid-batch) would resume from the wrong result, or from a chain
    with a hole where an earlier call's result never landed. Committing after the batch keeps
    append order == chain order; a crash mid-batch loses nothing either, because the results
    of finished calls are in the workflow's history and are not run again.
    """

    def __init__(self, host: RunHost, tools: dict[str, ToolInfo]) -> None:
        self.host = host
        self.tools = tools
        self._finished: dict[str, Message] = {}
        """Results of this turn's parallel calls, by call ID, until they are committed."""

    def batch_after(self, durable: list[Entry]) -> list[Entry]:
        """The rest of a parallel batch to append with ``durable`` (the engine's commit of the
        batch's first result), chained after it in call order; ``[]`` when ``durable`` is not
        such a result or the batch is not complete."""
        engine = self.host.engine
        if len(durable) != 1 or not isinstance(durable[0], MessageEntry):
            return []
        first = durable[0]
        pending = [c.id for c in engine.pending_calls]
        if not pending or first.message.tool_call_id != pending[0] or len(pending) < 2:
            return []
        rest = pending[1:]
        if len(set(pending)) != len(pending) or any(i not in self._finished for i in rest):
            return []
        if not self.host.patched(TOOL_COMMIT):
            return []
        parent, out = first.id, list[Entry]()
        for call_id in rest:
            entry = MessageEntry(
                id=workflow_id_new(),
                parent_id=parent,
                created_at=first.created_at,
                message=self._finished[call_id],
            )
            out.append(entry)
            parent = entry.id
        return out

    def batch_committed(self, extra: list[Entry], times: list[StoredTimes]) -> None:
        """The batch's later results are stored: the engine records each under its ID."""
        for entry, stored in zip(extra, times, strict=True):
            assert isinstance(entry, MessageEntry)
            call_id = entry.message.tool_call_id
            self._finished.pop(call_id or "", None)
            self.host.producer_committed(entry.id, stored, call_id)

    def _runs_alone(self, call: ToolCall) -> bool:
        """The loop's own rule (``ModelLoop._run_tools``): a turn's calls run concurrently when
        there are several and every called tool is parallel-safe."""
        engine = self.host.engine
        turn = next((m for m in reversed(engine.produced) if m.role == "assistant"), None)
        calls = [c for c in turn.tool_calls() if not c.server] if turn is not None else [call]
        infos = [self.tools.get(c.name) for c in calls]
        return not (len(calls) > 1 and all(i is not None and i.parallel_safe for i in infos))

    def _stamp(self, call: ToolCall) -> Stamp | None:
        engine = self.host.engine
        if not self._runs_alone(call) or not self.host.patched(TOOL_COMMIT):
            return None
        return Stamp(
            id=workflow_id_new(),
            parent_id=engine.leaf_id or None,
            created_at=format_time(workflow.now()),
        )

    async def execute(
        self, tool: Tool | None, call: ToolCall, report: Callable[[str], Awaitable[None]]
    ) -> Message:
        host = self.host
        info = self.tools.get(call.name) or ToolInfo(name=call.name, max_attempts=1)
        stamp = self._stamp(call)
        t = host.timeouts
        try:
            answer: Message | ToolReply = await call_activity(
                "durable_agent.call_tool",
                CallToolInput(
                    session_id=host.session_id,
                    agent=host.agent,
                    call=call.model_dump(mode="json"),
                    stamp=stamp,
                ),
                Message if stamp is None else ToolReply,
                start_to_close=info.timeout,
                heartbeat=t.tool_heartbeat,
                retry=tool_retry(info, t),
                summary=f"tool {call.name}" + ("" if stamp is None else " (stores its result)"),
                # a stamped attempt may commit while a cancel is on its way: wait for its
                # outcome, so a stored result gets its receipt instead of a cancelled sibling
                wait_for_cancel=stamp is not None,
            )
        except ActivityError as exc:
            if is_cancellation(exc):
                raise asyncio.CancelledError() from exc
            kind, text = activity_failure(exc)
            if kind == PAYLOAD_TOO_LARGE:
                host.fail_turn(PayloadTooLargeError(text))
            answer = error_tool_result_message(
                call.id,
                call.name,
                f"tool execution failed: {kind}: {text}",
                timestamp=workflow.now(),
            )
            stamp = None
        if isinstance(answer, Message):
            if not self._runs_alone(call):
                self._finished[call.id] = answer
            return answer
        assert stamp is not None
        landed: Message | None = None
        if workflow.cancellation_reason() is not None:
            host.defer_cancel()  # recorded first, then the cancellation proceeds
            if self.host.patched(TOOL_LANDED):
                # the loop may be unwinding already and never yield it: the engine's cancel
                # records it instead of a "cancelled" sibling (issue 11 item 1 on Temporal)
                landed = answer.message
        host.producer_committed(stamp.id, answer.stored, call.id, landed=landed)
        return answer.message
