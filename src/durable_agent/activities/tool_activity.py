"""The ``call_tool`` activity: one tool call with the worker's handler.

Failures are retried per the tool's own policy by Temporal; the workflow answers a call the
retries gave up on. With a stamp (SPEC §7.2) the result is committed here, under the stamp.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..agent.tool_exec import failure_text, unknown_tool_result
from ..ai.messages import (
    Message,
    ToolCall,
    encodable_text,
    error_tool_result_message,
    tool_result_message,
)
from ..ai.tools import ToolContext
from ..session.entries import Entry, MessageEntry
from ..session.errors import EntryTooLargeError
from .base import (
    CALL_GRACE,
    STORE_GRACE,
    ActivityBase,
    find_entry,
    heartbeating,
    is_retry,
    stored_message,
)
from .spec import AgentSpec
from .types import CallToolInput, Stamp, ToolReply, stored_times

__all__ = ["ToolActivity"]


class ToolActivity(ActivityBase):
    """``durable_agent.call_tool``."""

    @activity.defn(name="durable_agent.call_tool")
    async def call_tool(self, inp: CallToolInput) -> Message | ToolReply:
        """Run one tool call with the worker's handler; failures are retried per the tool's
        policy by Temporal, and the workflow answers an abandoned call itself.

        With a stamp (SPEC §7.2) the result is committed here, under the stamp, and a stamp that
        is already stored (an earlier attempt committed, then crashed or lost the race) is
        returned without running the tool again; a conflicting earlier write wins."""
        spec = self.agent_spec(inp.agent)
        call = ToolCall.model_validate(inp.call)
        if inp.stamp is not None:
            if is_retry():
                async with heartbeating(STORE_GRACE):  # a slow read must not outlast the timeout
                    stored = find_entry(await self.stored_entries(inp.session_id), inp.stamp.id)
                if stored is not None:
                    # committed by an earlier attempt: a tool whose result is stored never runs
                    # again
                    return _tool_reply(stored)
            result = await self.run_tool(spec, call)
            commit = asyncio.ensure_future(self.commit_result(inp.session_id, inp.stamp, result))
            try:
                return _tool_reply(await asyncio.shield(commit))
            except asyncio.CancelledError:
                # cancelled while the result was being written: a started write completes
                # (SPEC §2.1) and the workflow (waiting for this attempt) records it first
                return _tool_reply(await commit)
        return await self.run_tool(spec, call)

    async def commit_result(self, session_id: str, stamp: Stamp, result: Message) -> MessageEntry:
        """Commit a tool result under its stamp; one the store refuses as too large is answered
        ``tool execution failed: EntryTooLargeError: …`` under the same stamp (SPEC §5.3: the
        call is never left dangling; the same stand-in the engine stores in process)."""
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
            async with heartbeating(CALL_GRACE):
                blocks = await tool.invoke(call.arguments, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            non_retryable = type(exc).__name__ in tool.retry.non_retryable
            # the message becomes the result text (SPEC §5.3); the chain stays on the worker
            raise ApplicationError(  # (a message Temporal cannot encode fails the activity task)
                encodable_text(str(exc)), type=type(exc).__name__, non_retryable=non_retryable
            ) from None
        result = tool_result_message(call.id, call.name, *blocks)
        self.check_size(f"result of tool {call.name!r}", result.model_dump_json())
        return result


def _tool_reply(entry: Entry) -> ToolReply:
    stored = stored_message(entry, "tool call")
    return ToolReply(message=stored.message, stored=stored_times(stored))
