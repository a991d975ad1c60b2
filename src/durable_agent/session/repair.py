"""Orphaned tool-call repair: every view answers every call, so providers accept it.

A crash between an assistant message and its tool results leaves calls without results, which
providers reject. :func:`repair_tool_calls` is a pure projection applied to every model view;
:func:`start_repairs` is the one place a run computes what it must store before it continues
(docs/design.md#repair-and-reconcile), for both executors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..ai.messages import Message, ToolCall, error_tool_result_message
from .entries import MessageEntry

__all__ = [
    "INTERRUPTED_TEXT",
    "dangling_calls",
    "interrupted_result",
    "repair_entries",
    "repair_tool_calls",
    "start_repairs",
]

INTERRUPTED_TEXT = "tool execution interrupted"


def interrupted_result(call: ToolCall, dangling: Message) -> Message:
    """The synthesized result for an unanswered call (timestamped like the dangling message)."""
    result = error_tool_result_message(
        call.id, call.name, INTERRUPTED_TEXT, timestamp=dangling.timestamp
    )
    if dangling.timestamp is None:  # an unparsable stored time stays unknown, never "now"
        result = result.model_copy(update={"timestamp": None})
    return result


def _client_calls(message: Message) -> list[ToolCall]:
    return [c for c in message.tool_calls() if not c.server]


def _unanswered(calls: list[ToolCall], results: Sequence[Message]) -> list[ToolCall]:
    answered: dict[str, int] = {}
    for r in results:
        if r.tool_call_id is not None:
            answered[r.tool_call_id] = answered.get(r.tool_call_id, 0) + 1
    missing: list[ToolCall] = []
    for call in calls:
        if answered.get(call.id, 0) > 0:
            answered[call.id] -= 1
        else:
            missing.append(call)
    return missing


def repair_tool_calls(messages: Sequence[Message]) -> list[Message]:
    """Copy ``messages``, adding an interrupted result for each unanswered non-server call.

    Only the contiguous tool results right after an assistant message answer its calls; results
    with unknown IDs pass through; a call ID appearing twice needs two results.
    """
    out: list[Message] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        out.append(message)
        i += 1
        if message.role != "assistant":
            continue
        calls = _client_calls(message)
        if not calls:
            continue
        results: list[Message] = []
        while i < n and messages[i].role == "tool_result":
            results.append(messages[i])
            i += 1
        out.extend(results)
        out.extend(interrupted_result(c, message) for c in _unanswered(calls, results))
    return out


def dangling_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The unanswered non-server calls when ``messages`` ends with an assistant message calling
    tools (possibly followed by some of its results); ``[]`` otherwise."""
    j = len(messages)
    while j > 0 and messages[j - 1].role == "tool_result":
        j -= 1
    if j == 0 or messages[j - 1].role != "assistant":
        return []
    calls = _client_calls(messages[j - 1])
    return _unanswered(calls, messages[j:]) if calls else []


def start_repairs(view: Sequence[Message]) -> list[MessageEntry]:
    """Run-start repair (docs/design.md#repair-and-reconcile): for a raw model view ending with an
    assistant message whose non-server calls are unanswered (possibly followed by some results), one
    synthetic ``tool execution interrupted`` entry per missing result, in call order; else
    ``[]``."""
    calls = dangling_calls(view)
    if not calls:
        return []
    j = len(view)
    while view[j - 1].role == "tool_result":
        j -= 1
    dangling = view[j - 1]
    return repair_entries([interrupted_result(c, dangling) for c in calls])


def repair_entries(
    results: Sequence[Message], created_at: datetime | None = None
) -> list[MessageEntry]:
    """The entries that store run-start repair results: synthetic
    (docs/design.md#repair-and-reconcile), so the history view keeps projecting them where the
    dangling message is. The Temporal run builds its own from the results ``load_path`` computed
    with :func:`start_repairs`."""
    header = {} if created_at is None else {"created_at": created_at}
    return [MessageEntry(message=m, synthetic=True, **header) for m in results]
