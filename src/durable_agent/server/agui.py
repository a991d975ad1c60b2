"""A run's events in the AG-UI protocol, for front-ends built on AG-UI clients.

``POST /v1/agui`` (or ``/v1/agui/{agent}``) takes AG-UI's ``RunAgentInput``: ``threadId`` names
the session (under the caller's prefix), the last message (a user message) is the run's input,
``runId`` the run's ID (one the HTTP API takes; else the run gets its own and the events still
name the input's). It starts the run and streams it as AG-UI events (the ``ag-ui-protocol``
package's types), built from the same frames as the session stream: live text as
``TEXT_MESSAGE_CONTENT``, each stored reply's tool calls as ``TOOL_CALL_START/ARGS/END``, each
stored result as ``TOOL_CALL_RESULT``, and the run's end as ``RUN_FINISHED`` (of the
``cancelled`` outcome for a cancelled run) or ``RUN_ERROR``. AG-UI has no way to take back
text a client was shown: when a retried model call starts its reply over, the text so far ends
as one message and the retry streams as the next (docs/design.md#http-api).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from ..durable.inputs import check_run_input, text
from ..session.codec import wire_to_entry
from ..session.entries import MessageEntry
from ..session.store import entries_after
from .deps import REFUSALS, Caller, ServerDep, answers, runs
from .hub import Frame
from .routes_runs import CLIENT_ID
from .runs import Runs, made_for_start
from .tenants import Tenant

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["agui"], responses=REFUSALS)

STREAMED = {
    "response_class": StreamingResponse,  # the route answers its own; this one names no type
    **answers(200, None, 409, 413, 415),
    "openapi_extra": {
        "responses": {
            "200": {
                "description": "the run's AG-UI events (RUN_STARTED ... RUN_FINISHED or RUN_ERROR)",
                "content": {"text/event-stream": {}},
            }
        }
    },
}
"""What the document says the AG-UI route answers: AG-UI's events, as server-sent events."""

ENDED = {"completed", "failed", "cancelled"}


def _question(body: RunAgentInput) -> str:
    """The input's last message, the new one (a client sends the whole history each time):
    a user message. Any other ends a history with no new question, and a user message further
    up was asked already (docs/design.md#http-api)."""
    if not body.messages:
        raise ValueError("the AG-UI input has no messages: its last message is the question")
    message = body.messages[-1]
    if message.role != "user":
        raise ValueError(
            f"the AG-UI input's last message is a {message.role} message: a run answers a new"
            " user message (this server calls no client-side tools)"
        )
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content)


def _session(tenant: Tenant, thread_id: str) -> str:
    sid = thread_id if thread_id.startswith(tenant.prefix) else tenant.prefix + thread_id
    return tenant.session(sid)


class Translation:
    """Our frames of one run -> AG-UI events (module doc); its boundary events name the run
    as the input did (``input_run_id``)."""

    def __init__(self, thread_id: str, run_id: str, input_run_id: str) -> None:
        self.thread_id, self.run_id, self.input_run_id = thread_id, run_id, input_run_id
        self.open: str | None = None
        """The ID of the text message streaming now."""
        self.shown = ""
        self.started = 0
        """Text messages started from live text (each restart starts one, of its own ID)."""

    def frame(self, frame: Frame) -> list[BaseEvent]:
        data = frame.data
        if frame.event == "delta" and data["run_id"] == self.run_id:
            return self._piece(data)
        if frame.event == "entry":
            return self._entry(data["entry"])
        if frame.event == "run" and data["run_id"] == self.run_id and data["status"] in ENDED:
            return [*self._close(), self._end(data["status"], data.get("error"))]
        if frame.event == "deleted":
            return [RunErrorEvent(message="the session was deleted", code="deleted")]
        return []

    def _piece(self, data: dict[str, Any]) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if data["restart"]:
            out += self._close()
        if self.open is None:
            self.open = f"{self.run_id}:{data['entry_parent']}:{self.started}"
            self.started += 1
            self.shown = ""
            out.append(TextMessageStartEvent(message_id=self.open, role="assistant"))
        if data["text"]:
            self.shown += data["text"]
            out.append(TextMessageContentEvent(message_id=self.open, delta=data["text"]))
        return out

    def _close(self) -> list[BaseEvent]:
        if self.open is None:
            return []
        message_id, self.open = self.open, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _entry(self, wire: dict[str, Any]) -> list[BaseEvent]:
        entry = wire_to_entry(wire)
        if not isinstance(entry, MessageEntry):
            return []
        message = entry.message
        out: list[BaseEvent] = []
        if message.role == "assistant":
            said = message.text()
            if self.open is None and said:
                out.append(TextMessageStartEvent(message_id=entry.id, role="assistant"))
                self.open, self.shown = entry.id, ""
            if self.open is not None and said.startswith(self.shown) and said != self.shown:
                out.append(
                    TextMessageContentEvent(message_id=self.open, delta=said[len(self.shown) :])
                )
            shown_as = self.open or entry.id  # its calls are the message its text was
            out += self._close()
            for call in message.tool_calls():
                out.append(
                    ToolCallStartEvent(
                        tool_call_id=call.id, tool_call_name=call.name, parent_message_id=shown_as
                    )
                )
                out.append(
                    ToolCallArgsEvent(tool_call_id=call.id, delta=json.dumps(call.arguments))
                )
                out.append(ToolCallEndEvent(tool_call_id=call.id))
        elif message.role == "tool_result" and message.tool_call_id:
            out.append(
                ToolCallResultEvent(
                    message_id=entry.id, tool_call_id=message.tool_call_id, content=message.text()
                )
            )
        return out

    def _end(self, status: str, error: dict[str, str] | None) -> BaseEvent:
        if status == "completed":
            return RunFinishedEvent(thread_id=self.thread_id, run_id=self.input_run_id)
        if status == "cancelled":  # stopped, not failed: a client shows no error for a stop
            return RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.input_run_id,
                outcome=RunFinishedCancelledOutcome(),
            )
        if error is None:
            return RunErrorEvent(message=f"the run {status}", code=status)
        why = f"the run {status}: {error['type']}: {error['message']}"
        return RunErrorEvent(message=why, code=error["type"])


async def _events(
    queue: asyncio.Queue[Frame | None],
    leave: Any,
    run_id: str,
    body: RunAgentInput,
    keepalive: float,
) -> AsyncIterator[str]:
    """The run's AG-UI events; a comment line after each ``keepalive`` seconds of none (a long
    tool call, a call waiting for a person), as on the session stream: proxies close a
    connection silent for a minute, and an AG-UI client's SSE parser skips comments."""
    encoder = EventEncoder()
    translation = Translation(body.thread_id, run_id, body.run_id)
    try:
        yield encoder.encode(RunStartedEvent(thread_id=body.thread_id, run_id=body.run_id))
        while True:
            try:
                frame = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if frame is None:
                return
            for event in translation.frame(frame):
                yield encoder.encode(event)
                if isinstance(event, RunFinishedEvent | RunErrorEvent):
                    return
    finally:
        leave(queue)


@router.post("/agui", operation_id="agui", **STREAMED)
@router.post("/agui/{agent}", operation_id="agui_agent", **STREAMED)
async def agui(
    body: RunAgentInput, srv: ServerDep, tenant: Caller, agent: str | None = None
) -> StreamingResponse:
    """Start a run and stream it (module doc). The stream joins the session's hub before the
    run starts, so it sees the run from its first entry to its end."""
    sid = _session(tenant, body.thread_id)
    question = text(_question(body))
    check_run_input([question], nothing_stored=False)  # a blank one: before the session is made
    runner = runs(srv)
    runner.agent(agent)  # an unknown one is refused before the session is created
    async with made_for_start(srv.store, sid):  # refused, it leaves no session it made
        after = len(await entries_after(srv.store, sid, 0))
        hub = await srv.hubs.hub(sid, after)
        queue, _, _ = hub.join()
        try:
            run_id = await _start(runner, sid, question, agent, body.run_id, queue)
        except BaseException:
            hub.leave(queue)
            raise
    stream = _events(queue, hub.leave, run_id, body, srv.keepalive)
    return StreamingResponse(stream, media_type="text/event-stream")


async def _start(
    runner: Runs,
    sid: str,
    question: MessageEntry,
    agent: str | None,
    input_run_id: str,
    queue: asyncio.Queue[Frame | None],
) -> str:
    """Start the run the input names (its ``runId``, when one the HTTP API takes): an input
    sent again (its answer lost) starts nothing and follows that run, or tells its end when
    it has ended (no frame will)."""
    own = input_run_id if re.fullmatch(CLIENT_ID, input_run_id) else None
    known = own is not None and await runner.has(sid, own)
    run_id = await runner.start(
        sid, [question], leaf_id=None, agent=agent, on_busy="reject", run_id=own
    )
    status = await runner.status(sid, run_id) if known else None
    if status in ENDED:
        failure = await runner.failure(sid, run_id) if status == "failed" else None
        error = {} if failure is None else {"error": failure.model_dump()}
        queue.put_nowait(Frame("run", {"run_id": run_id, "status": status, **error}))
    return run_id
