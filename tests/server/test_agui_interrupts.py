"""A call waiting for a person over AG-UI: the stream ends in an interrupt naming it, and the
next input's ``resume`` decides it and follows the run on, on both executors."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    Event,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import TypeAdapter
from temporalio.client import Client

from durable_agent.ai import Reply, TextContent, ToolCall, assistant_message, tool, user_message
from durable_agent.server.runs import STORE_UNAVAILABLE
from durable_agent.session import Entry, MessageEntry, StoreUnavailableError
from durable_agent.session.approvals import ApprovalDecision
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import helper_client, scripted
from tests.support.polling import eventually

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)
HISTORY = [{"id": "m1", "role": "user", "content": "Mail Ann, please."}]


@tool(approval=True)
async def send_email(to: str, subject: str = "hello") -> str:
    """Send an email (a person approves each one)."""
    return f"sent {subject!r} to {to}"


def _spec(approval_wait: float = 3600.0) -> AgentSpec:
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    replies = [Reply(tool_calls=[call]), Reply(text="Done with the mail.")]
    return AgentSpec(model=scripted(replies), tools=[send_email], approval_wait=approval_wait)


async def _events(
    client: httpx.AsyncClient, body: dict[str, Any], at: str = "/v1/agui"
) -> list[Event]:
    events = []
    async with client.stream("POST", at, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(EVENTS.validate_python(json.loads(line[6:])))
    return events


async def _ask(client: httpx.AsyncClient, thread: str, at: str = "/v1/agui") -> RunFinishedEvent:
    """The question's stream: the call, then an interrupt naming it (the run waits on)."""
    body = {"threadId": thread, "runId": "ask-1", "messages": HISTORY}
    events = await _events(client, body, at)
    kinds = [e.type for e in events]
    assert kinds[0] == EventType.RUN_STARTED, kinds
    starts = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert [s.tool_call_id for s in starts] == ["call-1"]
    assert EventType.TOOL_CALL_RESULT not in kinds, "the call waits: it has no result yet"
    end = events[-1]
    assert isinstance(end, RunFinishedEvent) and end.run_id == "ask-1", events
    assert isinstance(end.outcome, RunFinishedInterruptOutcome), end
    [interrupt] = end.outcome.interrupts
    assert interrupt.id == "call-1" and interrupt.tool_call_id == "call-1"
    assert interrupt.reason == "tool_approval" and interrupt.response_schema
    return end


def _resume(thread: str, run_id: str, *answers: dict[str, Any]) -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "messages": HISTORY, "resume": list(answers)}


def _finished(events: list[Event], run_id: str) -> tuple[str, str]:
    """The resumed stream's tool result and final text; it finished, no interrupt."""
    end = events[-1]
    assert isinstance(end, RunFinishedEvent) and end.run_id == run_id, events
    assert end.outcome is None or end.outcome.type == "success", end
    [result] = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert result.tool_call_id == "call-1" and isinstance(result.content, str)
    said = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    return result.content, said


@pytest.mark.parametrize("approval_wait", [3600.0, 0.05], ids=["run_waits", "run_parked"])
async def test_an_approval_is_an_interrupt_and_a_resume_approves_it(
    temporal: Client | None, tmp_path: Path, approval_wait: float
) -> None:
    """The question's stream ends in an interrupt for the call waiting for a person; the
    resume approving it (with edited arguments) is decided as the approvals route does, and
    its stream shows the call's result and the final reply: the run that asked takes it while
    it waits, a run started for the turn once it parked."""
    async with helper_client(temporal, tmp_path, _spec(approval_wait)) as (client, store):
        thread = f"mail-{tmp_path.name}"  # a run ID of its own on the shared Temporal server
        await _ask(client, thread)
        if approval_wait < 1:  # the interrupt came as it began to wait: it parks next
            await _parked(client, thread, "ask-1")
        answer = {"approved": True, "args": {"to": "ann@example.com", "subject": "lunch"}}
        entry = {"interruptId": "call-1", "status": "resolved", "payload": answer}
        events = await _events(client, _resume(thread, "resume-1", entry))
        assert events[0].type == EventType.RUN_STARTED
        result, said = _finished(events, "resume-1")
        assert result == "sent 'lunch' to ann@example.com"
        assert said == "Done with the mail."
        stored = await store.load_entries(thread)
        [decision] = [e for e in stored if isinstance(e, ApprovalDecision)]
        assert decision.approved and decision.args == answer["args"]


async def test_a_denial_with_a_reason_and_a_resume_of_a_call_that_does_not_wait(
    temporal: Client | None, tmp_path: Path
) -> None:
    """A resume naming a call that does not wait is refused before any stream (400, naming
    the calls that wait), deciding nothing; a denial with a reason answers the call with it
    and the run goes on to its reply."""
    async with helper_client(temporal, tmp_path, _spec()) as (client, store):
        await _ask(client, "deny")
        wrong = {"interruptId": "call-9", "status": "resolved", "payload": {"approved": True}}
        refused = await client.post("/v1/agui", json=_resume("deny", "resume-0", wrong))
        assert refused.status_code == 400, refused.text
        message = refused.json()["error"]["message"]
        assert "call-9" in message and "call-1" in message, message
        assert not [e for e in await store.load_entries("deny") if isinstance(e, ApprovalDecision)]
        no = {"approved": False, "reason": "not to Ann"}
        entry = {"interruptId": "call-1", "status": "resolved", "payload": no}
        events = await _events(client, _resume("deny", "resume-1", entry))
        result, said = _finished(events, "resume-1")
        assert result == "tool call denied: not to Ann"
        assert said == "Done with the mail."
        stored = await store.load_entries("deny")
        [decision] = [e for e in stored if isinstance(e, ApprovalDecision)]
        assert not decision.approved and decision.reason == "not to Ann"
        texts = [e.message.text() for e in stored if isinstance(e, MessageEntry)]
        assert texts.count("Mail Ann, please.") == 1, "the resume asked nothing again"


class WholeReadsDown:
    """The server's store failing each read of a whole session (from seq 0) once the session
    holds more than ``kept`` entries, as a store does that stops answering: the stream's read
    of the waiting calls at the run's end fails, while the hub, reading on from where it
    started, still reads (a stream's first read, of the ``kept`` entries, works)."""

    def __init__(self, store: FileStore, kept: int, where: Path) -> None:
        self.inner, self.kept, self.where, self.failed = store.load_entries_after, kept, where, 0
        store.load_entries_after = self.read  # type: ignore[method-assign]  # spies on the store

    async def read(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        found = await self.inner(session_id, after, limit)
        if after == 0 and len(found) > self.kept:
            self.failed += 1
            raise StoreUnavailableError(f"the store at {self.where} did not answer in time")
        return found


@pytest.mark.parametrize("approval_wait", [3600.0, 0.05], ids=["run_waits", "run_parked"])
async def test_the_store_down_as_the_interrupt_is_read_ends_the_stream_in_a_run_error(
    temporal: Client | None,
    tmp_path: Path,
    approval_wait: float,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run waits for a person (or parked) and the store fails the read of the calls that
    wait: the stream ends in ``RUN_ERROR`` saying the store is unavailable, as a 503 does,
    naming nothing of the server, and the server logs one line, no traceback (it ended in an
    ASGI traceback, the client's connection cut with no end event)."""
    caplog.set_level(logging.INFO)
    async with helper_client(temporal, tmp_path, _spec(approval_wait)) as (client, store):
        thread = f"down-{tmp_path.name}"
        earlier = MessageEntry(id="q0", message=user_message("Hello?"))
        said = MessageEntry(
            id="a0", parent_id="q0", message=assistant_message(TextContent(text="Hi."))
        )
        await store.create_session(thread)
        await store.append_entries(thread, [earlier, said])
        reads = WholeReadsDown(store, kept=2, where=tmp_path)
        body = {"threadId": thread, "runId": "ask-1", "messages": HISTORY}
        events = await _events(client, body)
        assert reads.failed, "the interrupt's read failed"
        end = events[-1]
        assert isinstance(end, RunErrorEvent), events
        assert end.code == "StoreUnavailableError" and end.message == STORE_UNAVAILABLE
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    noted = [r for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(noted) == 1 and noted[0].levelname == "WARNING", caplog.text
    assert "\n" not in noted[0].getMessage()


def _interrupted(events: list[Event], run_id: str) -> list[str]:
    """The IDs of the interrupts the stream ended with."""
    end = events[-1]
    assert isinstance(end, RunFinishedEvent) and end.run_id == run_id, events
    assert isinstance(end.outcome, RunFinishedInterruptOutcome), end
    return [i.id for i in end.outcome.interrupts]


@pytest.mark.parametrize("approval_wait", [3600.0, 0.05], ids=["run_waits", "run_parked"])
async def test_a_resume_answering_some_calls_ends_in_an_interrupt_naming_those_left(
    temporal: Client | None, tmp_path: Path, approval_wait: float
) -> None:
    """Two calls wait; a resume answering one ends its stream at once in an interrupt naming
    the other, the decision stored (the run that asked took it, or it waits at the leaf), and
    the resume answering the other follows the run on to both results and the reply."""
    calls = [
        ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"}),
        ToolCall(id="call-2", name="send_email", arguments={"to": "bob@example.com"}),
    ]
    replies = [Reply(tool_calls=calls), Reply(text="Both handled.")]
    spec = AgentSpec(model=scripted(replies), tools=[send_email], approval_wait=approval_wait)
    async with helper_client(temporal, tmp_path, spec) as (client, store):
        thread = f"two-{tmp_path.name}"
        asked = await _events(client, {"threadId": thread, "runId": "ask-1", "messages": HISTORY})
        assert _interrupted(asked, "ask-1") == ["call-1", "call-2"]
        if approval_wait < 1:  # the interrupt came as it began to wait: it parks next
            await _parked(client, thread, "ask-1")
        yes = {"interruptId": "call-1", "status": "resolved", "payload": {"approved": True}}
        events = await _events(client, _resume(thread, "resume-1", yes))
        assert events[0].type == EventType.RUN_STARTED
        assert _interrupted(events, "resume-1") == ["call-2"]
        assert not [e for e in events if isinstance(e, ToolCallResultEvent)], "none ran yet"
        stored = await store.load_entries(thread)
        decided = [(e.tool_call_id, e.approved) for e in stored if isinstance(e, ApprovalDecision)]
        assert decided == [("call-1", True)]
        no = {"interruptId": "call-2", "status": "cancelled", "payload": {"reason": "not Bob"}}
        events = await _events(client, _resume(thread, "resume-2", no))
        end = events[-1]
        assert isinstance(end, RunFinishedEvent) and end.outcome is None, events
        results = {e.tool_call_id: e.content for e in events if isinstance(e, ToolCallResultEvent)}
        assert results == {
            "call-1": "sent 'hello' to ann@example.com",
            "call-2": "tool call denied: not Bob",
        }
        said = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
        assert said == "Both handled."


async def _parked(client: httpx.AsyncClient, thread: str, run_id: str) -> None:
    """Until the run that asked parked (its wait over, it ended with the calls waiting)."""

    async def ended() -> bool:
        answer = await client.get(f"/v1/sessions/{thread}/runs/{run_id}")
        return bool(answer.json()["status"] == "completed")

    await eventually(ended, what=f"run {run_id} parked")


@pytest.mark.parametrize("approval_wait", [3600.0, 0.05], ids=["run_waits", "run_parked"])
async def test_a_resume_naming_no_agent_on_a_server_of_several(
    temporal: Client | None, tmp_path: Path, approval_wait: float
) -> None:
    """On a server of several agents a resume at ``/v1/agui`` (no agent named) is decided: the
    run that asked takes it while it waits and goes on; once it parked, nothing can carry the
    calls out, and the stream ends in ``RUN_ERROR`` (``NoRunStarted``), the decision stored,
    while a resume at ``/v1/agui/helper`` goes on with that agent (docs/design.md#http-api).
    It was refused 422 ``UnknownAgentError`` before anything was decided, even while the
    run that asked waited to take it."""
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    parked = approval_wait < 1
    replies = [
        Reply(tool_calls=[call]),
        *([Reply(text="Sent."), Reply(tool_calls=[call])] * parked),
    ]
    spec = AgentSpec(
        model=scripted([*replies, Reply(text="Sent.")]),
        tools=[send_email],
        approval_wait=approval_wait,
    )
    other = AgentSpec(model=scripted([Reply(text="I am the other agent.")]))
    yes = {"interruptId": "call-1", "status": "resolved", "payload": {"approved": True}}
    async with helper_client(temporal, tmp_path, spec, {"other": other}) as (client, store):
        thread = f"unnamed-{tmp_path.name}"
        body = {"threadId": thread, "runId": "ask-1", "messages": HISTORY}
        assert _interrupted(await _events(client, body, "/v1/agui/helper"), "ask-1") == ["call-1"]
        if parked:
            await _parked(client, thread, "ask-1")
        events = await _events(client, _resume(thread, "resume-1", yes))
        stored = await store.load_entries(thread)
        assert [e.tool_call_id for e in stored if isinstance(e, ApprovalDecision)] == ["call-1"]
        end = events[-1]
        if not parked:
            assert _finished(events, "resume-1") == ("sent 'hello' to ann@example.com", "Sent.")
            return
        assert isinstance(end, RunErrorEvent) and end.code == "NoRunStarted", events
        assert "/v1/agui/{agent}" in end.message, end.message
        assert "POST /v1/sessions/{id}/runs" in end.message, end.message
        started = await client.post(
            f"/v1/sessions/{thread}/runs", json={"inputs": [], "agent": "helper"}
        )
        assert started.status_code == 202, started.text
        await _completed(client, thread, started.json()["run_id"])
        assert "sent 'hello' to ann@example.com" in _said(await store.load_entries(thread))
        thread = f"named-{tmp_path.name}"
        body = {"threadId": thread, "runId": "ask-2", "messages": HISTORY}
        assert _interrupted(await _events(client, body, "/v1/agui/helper"), "ask-2") == ["call-1"]
        await _parked(client, thread, "ask-2")
        events = await _events(client, _resume(thread, "resume-2", yes), "/v1/agui/helper")
        assert _finished(events, "resume-2") == ("sent 'hello' to ann@example.com", "Sent.")


class LoadsDownOnceDecided:
    """The server's store failing each whole load of a session that holds a decision, as a
    store does that stops answering just after the decision was stored: the run that would
    carry the decided calls out cannot be started (``continue_settled`` reads the path)."""

    def __init__(self, store: FileStore, where: Path) -> None:
        self.inner, self.where, self.down = store.load_entries, where, True
        store.load_entries = self.load  # type: ignore[method-assign]  # spies on the store

    async def load(self, session_id: str) -> list[Entry]:
        found = await self.inner(session_id)
        if self.down and any(isinstance(e, ApprovalDecision) for e in found):
            raise StoreUnavailableError(f"the store at {self.where} did not answer in time")
        return found


@pytest.mark.parametrize("several", [False, True], ids=["one_agent", "several_agents"])
async def test_a_resume_whose_run_cannot_start_says_so_not_to_name_the_agent(
    temporal: Client | None, tmp_path: Path, caplog: pytest.LogCaptureFixture, several: bool
) -> None:
    """The run that asked parked; the resume's decision is stored, and the store fails as the
    run that carries the call out would start: the stream ends in ``RUN_ERROR``
    (``NoRunStarted``) saying the run did not start and how to start it, not to name the agent
    (this server has one, or the route names it), and naming nothing of the server; a run with
    no input started as it says carries the call out (it said to name the agent, which does
    nothing here). The server logs the failure in one line: it logged two, the decision's try
    and the resume's again."""
    others = {"other": AgentSpec(model=scripted([Reply(text="other")]))} if several else None
    at, named = ("/v1/agui/helper", {"agent": "helper"}) if several else ("/v1/agui", {})
    async with helper_client(temporal, tmp_path, _spec(0.05), others) as (client, store):
        thread = f"nostart-{tmp_path.name}"
        await _ask(client, thread, at)
        await _parked(client, thread, "ask-1")
        loads = LoadsDownOnceDecided(store, tmp_path)
        yes = {"interruptId": "call-1", "status": "resolved", "payload": {"approved": True}}
        events = await _events(client, _resume(thread, "resume-1", yes), at)
        end = events[-1]
        assert isinstance(end, RunErrorEvent) and end.code == "NoRunStarted", events
        assert "name the agent" not in end.message, end.message
        assert "POST /v1/sessions/{id}/runs" in end.message, end.message
        assert str(tmp_path) not in end.message, end.message
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and "did not answer in time" in warned[0], warned
        loads.down = False
        started = await client.post(f"/v1/sessions/{thread}/runs", json={"inputs": [], **named})
        assert started.status_code == 202, started.text
        await _completed(client, thread, started.json()["run_id"])
        assert "sent 'hello' to ann@example.com" in _said(await store.load_entries(thread))


async def _completed(client: httpx.AsyncClient, thread: str, run_id: str) -> None:
    async def done() -> bool:
        answer = await client.get(f"/v1/sessions/{thread}/runs/{run_id}")
        return bool(answer.json()["status"] == "completed")

    await eventually(done, what=f"run {run_id} completed")


def _said(stored: list[Entry]) -> list[str]:
    return [e.message.text() for e in stored if isinstance(e, MessageEntry)]
