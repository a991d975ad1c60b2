"""The run an AG-UI input names: started, or followed when the input comes again.

A client that lost its answer (its connection cut, or a ``RUN_ERROR`` that told it to) sends
the input again with the same ``runId``: that starts nothing and follows the run, which may be
half done or over. What the run stored before the stream joined its hub never comes as a frame,
so the stream opens with AG-UI's ``MESSAGES_SNAPSHOT`` of the session's transcript as stored
then (the path to its newest entry; meta, custom and compaction entries are not the client's),
and with the text a reply has streamed so far (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from ..session.entries import Entry, MessageEntry
from ..session.ids import CLIENT_ID
from ..session.tree import path
from ..session.views import transcript_view
from .frames import Frame
from .runs import Runs

__all__ = ["ENDED", "snapshot", "start_or_follow"]

ENDED = {"completed", "failed", "cancelled"}


async def start_or_follow(
    runner: Runs,
    sid: str,
    question: MessageEntry,
    agent: str | None,
    input_run_id: str,
    queue: asyncio.Queue[Frame],
) -> tuple[str, bool]:
    """Start the run the input names (its ``runId``, when one the HTTP API takes), or, for an
    input sent again, follow that run, telling its end when it has ended (no frame will) or
    its wait for a person (begun before the stream). The run's ID, and whether it was known."""
    own = input_run_id if re.fullmatch(CLIENT_ID, input_run_id) else None
    known = own is not None and await runner.has(sid, own)
    run_id = await runner.start(
        sid, [question], leaf_id=None, agent=agent, on_busy="reject", run_id=own
    )
    status = await runner.status(sid, run_id) if known else None
    if status == "awaiting_approval":
        queue.put_nowait(Frame("run", {"run_id": run_id, "status": status}))
    if status in ENDED:
        failure = await runner.failure(sid, run_id) if status == "failed" else None
        error = {} if failure is None else {"error": failure.model_dump()}
        queue.put_nowait(Frame("run", {"run_id": run_id, "status": status, **error}))
    return run_id, known


def snapshot(found: Sequence[tuple[int, Entry]]) -> tuple[MessagesSnapshotEvent, set[str]]:
    """The transcript of the path to the newest of ``found`` as AG-UI messages, and the
    entries its stored replies answer (a reply's live text for one of them was shown whole)."""
    entries = [entry for _, entry in found]
    shown = transcript_view(path(entries, entries[-1].id)) if entries else []
    messages = [m for m in map(_message, shown) if m is not None]
    answered = {m.id for m in messages if m.role == "assistant"}
    replied = {e.parent_id or "" for e in shown if e.id in answered}
    return MessagesSnapshotEvent(messages=messages), replied


def _message(entry: Entry) -> Message | None:
    if not isinstance(entry, MessageEntry):
        return None
    message, said = entry.message, entry.message.text()
    if message.role == "user":
        return UserMessage(id=entry.id, content=said)
    if message.role == "assistant":
        calls = [
            ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=json.dumps(c.arguments)))
            for c in message.tool_calls()
        ]
        return AssistantMessage(id=entry.id, content=said or None, tool_calls=calls or None)
    if message.tool_call_id:
        return ToolMessage(id=entry.id, content=said, tool_call_id=message.tool_call_id)
    return None
