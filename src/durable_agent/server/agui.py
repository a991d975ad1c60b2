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

A run whose calls wait for a person ends its stream in ``RUN_FINISHED`` of the ``interrupt``
outcome, one interrupt per waiting call (its ID the call's ID); the run keeps waiting. The
client answers with an input whose ``resume`` decides them (:mod:`.agui_resume`), and that
stream follows the run on to its next end or wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
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
from sse_starlette import EventSourceResponse

from ..durable.inputs import check_run_input, text
from ..session.approvals import PendingItem, tail_turn
from ..session.codec import wire_to_entry
from ..session.entries import Entry, MessageEntry
from ..session.errors import StoreUnavailableError
from ..session.store import entries_after, last_entry
from ..workflows.worker_logs import in_one_line
from .agui_ends import GRACE, ended_early, on_stop
from .agui_follow import ENDED, snapshot, start_or_follow
from .agui_resume import ANSWER_SCHEMA, carry_out, decisions, not_started, pending
from .app import Server
from .deps import REFUSALS, Caller, ServerDep, answers, runs
from .hub import Frame
from .routes_runs import existing
from .runs import RunFailure, made_for_start
from .sse import PacedStream
from .tenants import Tenant

__all__ = ["router"]

logger = logging.getLogger("durable_agent.server")

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

Waiting = Callable[[], Awaitable[tuple[int, list[PendingItem]]]]
"""The calls of the session that wait for a person, and the seq of the last one's request."""


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

    def __init__(
        self, thread_id: str, run_id: str, input_run_id: str, seq: int = 0, local: bool = False
    ) -> None:
        self.thread_id, self.run_id, self.input_run_id = thread_id, run_id, input_run_id
        self.local = local
        """The server runs its runs in its own process (its stop ends them)."""
        self.seq = seq
        """The seq of the last entry shown (those before the stream joined count as shown)."""
        self.asking = False
        """The run waits for a person (its status says so)."""
        self.open: str | None = None
        """The ID of the text message streaming now."""
        self.shown = ""
        self.started = 0
        """Text messages started from live text (each restart starts one, of its own ID)."""
        self.opening: list[BaseEvent] = []
        """What the stream shows before its frames (:meth:`catch_up`)."""
        self.replied: set[str] = set()
        """The entries the replies in the opening snapshot answer (their live text is old)."""

    def catch_up(
        self, found: Sequence[tuple[int, Entry]], pieces: Sequence[dict[str, Any]]
    ) -> list[BaseEvent]:
        """The opening of a stream that follows a run it did not see start (:mod:`.agui_follow`):
        ``found``, the session as stored once it joined the hub, as one snapshot, and
        ``pieces``, the text replies had streamed by then, opening their messages; frames of
        what ``found`` holds are not shown again."""
        event, self.replied = snapshot(found)
        self.seq = max([self.seq, *(seq for seq, _ in found)])
        self.opening = [event]
        for piece in pieces:
            self.opening += self.frame(Frame("delta", dict(piece)))
        return self.opening

    def frame(self, frame: Frame) -> list[BaseEvent]:
        data = frame.data
        if frame.event == "delta" and data["run_id"] == self.run_id:
            return [] if data["entry_parent"] in self.replied else self._piece(data)
        if frame.event == "entry":
            if data["seq"] <= self.seq:  # before the stream (a hub that had not read it yet)
                return []
            self.seq = max(self.seq, data["seq"])
            return self._entry(data["entry"])
        if frame.event == "run" and data["run_id"] == self.run_id:
            if data["status"] in ENDED:
                return [*self._close(), self._end(data["status"], data.get("error"))]
            self.asking = data["status"] == "awaiting_approval"
        if frame.event == "deleted":
            return [RunErrorEvent(message="the session was deleted", code="deleted")]
        if frame.event == "gone":
            return [*self._close(), ended_early(data["code"], self.run_id, local=self.local)]
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

    def interrupt(self, items: list[PendingItem]) -> list[BaseEvent]:
        """The stream's end while the run waits for people: an interrupt per waiting call,
        answered by the call's ID in the next input's ``resume`` (:mod:`.agui_resume`)."""
        asked = [
            Interrupt(
                id=p.tool_call_id,
                reason="tool_approval",
                message=f"{p.tool_name} waits for approval",
                tool_call_id=p.tool_call_id,
                response_schema=ANSWER_SCHEMA,
            )
            for p in items
        ]
        outcome = RunFinishedInterruptOutcome(interrupts=asked)
        end = RunFinishedEvent(thread_id=self.thread_id, run_id=self.input_run_id, outcome=outcome)
        return [*self._close(), end]

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


async def _asked(
    translation: Translation, waiting: Waiting, shown: list[BaseEvent]
) -> list[BaseEvent]:
    """``shown``, the events of a frame, and the interrupt that ends the stream once the run
    waits and every waiting call was shown (the run's status may come before the hub read
    the reply that made the calls); a run that parked (it waited ``approval_wait``) ends
    ``completed`` with calls still waiting, which is an interrupt too."""
    end = shown[-1] if shown else None
    if isinstance(end, RunFinishedEvent) and end.outcome is None:
        _, items = await waiting()
        return [*shown[:-1], *translation.interrupt(items)[-1:]] if items else shown
    if not translation.asking or shown:
        return shown
    seq, items = await waiting()
    if not items:  # decided meanwhile: the run's next status comes
        translation.asking = False
        return []
    return translation.interrupt(items) if translation.seq >= seq else []


def _waiting_in(srv: Server, sid: str) -> Waiting:
    async def waiting() -> tuple[int, list[PendingItem]]:
        return pending(await tail_turn(srv.store, sid))

    return waiting


async def events(
    queue: asyncio.Queue[Frame],
    leave: Any,
    translation: Translation,
    waiting: Waiting,
    keepalive: float,
    stopping: anyio.Event,
) -> AsyncIterator[bytes]:
    """The run's AG-UI events; a comment line after each ``keepalive`` seconds of none (a long
    tool call, a call waiting for a person), as on the session stream: proxies close a
    connection silent for a minute, and an AG-UI client's SSE parser skips comments. The
    store failing the read of the waiting calls ends it in ``RUN_ERROR``, as a 503 says it; so
    does its hub letting it go, or the server stopping (``stopping``: :mod:`.agui_ends`)."""
    encoder = EventEncoder()
    thread_id, run_id = translation.thread_id, translation.input_run_id
    told = on_stop(stopping, queue)
    try:
        yield encoder.encode(RunStartedEvent(thread_id=thread_id, run_id=run_id)).encode()
        for event in translation.opening:
            yield encoder.encode(event).encode()
        while True:
            try:
                frame = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            try:
                shown = await _asked(translation, waiting, translation.frame(frame))
            except StoreUnavailableError as exc:  # the headers are sent: no 503, an end now
                logger.warning("AG-UI stream of %s ended: %s", thread_id, in_one_line(exc))
                failure = RunFailure.of(exc)  # as a 503 says it: no path, no host
                shown = [RunErrorEvent(message=failure.message, code=failure.type)]
            for event in shown:
                yield encoder.encode(event).encode()
                if isinstance(event, RunFinishedEvent | RunErrorEvent):
                    return
    finally:
        told.cancel()
        leave(queue)


@router.post("/agui", operation_id="agui", **STREAMED)
@router.post("/agui/{agent}", operation_id="agui_agent", **STREAMED)
async def agui(
    body: RunAgentInput, srv: ServerDep, tenant: Caller, agent: str | None = None
) -> EventSourceResponse:
    """Start a run and stream it (module doc). The stream joins the session's hub before the
    run starts, so it sees the run from its first entry to its end."""
    if body.resume:
        return await _resume(body, srv, tenant, agent)
    sid = _session(tenant, body.thread_id)
    question = text(_question(body))
    check_run_input([question], nothing_stored=False)  # a blank one: before the session is made
    runner = runs(srv)
    runner.agent(agent)  # an unknown one is refused before the session is created
    async with made_for_start(srv.store, sid):  # refused, it leaves no session it made
        after = (await last_entry(srv.store, sid) or (0, None))[0]
        hub = await srv.hubs.hub(sid, after)
        queue, _, pieces = hub.join()
        try:
            run_id, known = await start_or_follow(runner, sid, question, agent, body.run_id, queue)
            translation = Translation(body.thread_id, run_id, body.run_id, after, runner.local)
            if known:  # sent again: what the run stored before now comes first
                found = await entries_after(srv.store, sid, 0)
                translation.catch_up(found, [p.data() for p in pieces])
        except BaseException:
            hub.leave(queue)
            raise
    return _streamed(srv, sid, hub.leave, queue, translation)


async def _resume(
    body: RunAgentInput, srv: Server, tenant: Tenant, agent: str | None
) -> EventSourceResponse:
    """Decide the calls the input's ``resume`` answers and follow the run that goes on
    (:mod:`.agui_resume`); its messages are not read (the question was asked already). The
    stream joins the hub before the decisions, so it sees the run from its next entry."""
    assert body.resume is not None
    sid = await existing(srv, _session(tenant, body.thread_id))
    runner = runs(srv)
    if agent is not None:  # none named: the run that asked takes it, if it waits
        runner.agent(agent)
    found = await tail_turn(srv.store, sid)  # the end of the path to the last entry
    after, (_, waiting) = found[-1][0] if found else 0, pending(found)
    made = decisions(body.resume, waiting, tenant.principal)
    hub = await srv.hubs.hub(sid, after)
    queue, _, _ = hub.join()
    try:
        run_id, status = await carry_out(runner, srv.store, sid, made, waiting, agent)
    except BaseException:
        hub.leave(queue)
        raise
    if status == "failed":  # decided, and nothing carries the calls out: say so, not hang
        error = not_started(runner, agent)
        queue.put_nowait(Frame("run", {"run_id": run_id, "status": status, "error": error}))
    elif status == "awaiting_approval":
        queue.put_nowait(Frame("run", {"run_id": run_id, "status": status}))
    translation = Translation(body.thread_id, run_id, body.run_id, after, runner.local)
    return _streamed(srv, sid, hub.leave, queue, translation)


def _streamed(
    srv: Server, sid: str, leave: Any, queue: asyncio.Queue[Frame], translation: Translation
) -> EventSourceResponse:
    """The run's AG-UI events as the answer; the server stopping ends them in ``RUN_ERROR``
    (sse-starlette tells, as it ends the session streams: :mod:`.agui_ends`), a client that
    stopped reading is dropped as the session stream drops one (:class:`.sse.PacedStream`)."""
    stopping = anyio.Event()
    stream = events(queue, leave, translation, _waiting_in(srv, sid), srv.keepalive, stopping)
    return PacedStream(stream, ping=0, shutdown_event=stopping, shutdown_grace_period=GRACE)
