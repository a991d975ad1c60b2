"""What a run stores in place of what it could not produce normally: the partial reply of a
cancelled model call, and the stand-in for a tool result the store refused as too large
(docs/design.md#cancellation, docs/design.md#repair-and-reconcile)."""

from __future__ import annotations

from ..agent.tool_exec import failure_text
from ..ai.messages import Message, ToolCall, with_call_ids
from ..session.errors import EntryTooLargeError

__all__ = ["CANCELLED_TEXT", "aborted_message", "stored_key", "too_large"]

CANCELLED_TEXT = "tool execution cancelled"


def aborted_message(partial: Message | None) -> Message | None:
    """A cancelled reply as stored: the partial message minus its unfinished tool call (the last
    block, still streaming when the call stopped), ``stop_reason="aborted"``; ``None`` if nothing
    is left to keep."""
    if partial is None:
        return None
    content = list(partial.content)
    if content and isinstance(content[-1], ToolCall):
        content.pop()
    if not content:
        return None
    return with_call_ids(partial.model_copy(update={"content": content, "stop_reason": "aborted"}))


def too_large(exc: BaseException | None) -> str | None:
    """``tool execution failed: EntryTooLargeError: …`` if ``exc`` is the store refusing an
    entry as too large: raised here, or reported by a remote commit (see CommitEffects)."""
    if isinstance(exc, EntryTooLargeError):
        return failure_text(exc)
    if exc is not None and getattr(exc, "kind", None) == EntryTooLargeError.__name__:
        return f"tool execution failed: {EntryTooLargeError.__name__}: {exc}"
    return None


def stored_key(message: Message) -> str | None:
    """Where an entry stored ahead of its ``message_end`` waits: ``""`` for the reply, the call
    ID for a tool result; ``None`` for messages no producer stores."""
    if message.role == "assistant":
        return ""
    if message.role == "tool_result" and message.tool_call_id:
        return message.tool_call_id
    return None
