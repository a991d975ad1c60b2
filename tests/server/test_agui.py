"""The AG-UI route: a run's events as the ``ag-ui-protocol`` types, from the stored entries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
from ag_ui.core import (
    Event,
    EventType,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import TypeAdapter
from temporalio.client import Client

from durable_agent.ai import ModelError, Reply, TextContent, ToolCall, assistant_message
from durable_agent.server import create_app
from durable_agent.server.agui import Translation
from durable_agent.server.hub import Frame
from durable_agent.session import Entry, MessageEntry
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import helper_client, lookup, scripted, serving, tool_script
from tests.support.disk import SwitchedDisk
from tests.support.gate_tool import GateTool

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


async def _agui_events(app: Any, body: dict[str, Any]) -> list[Event]:
    events = []
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        headers = {"Authorization": "Bearer k"}
        async with client.stream("POST", "/v1/agui", json=body, headers=headers) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(EVENTS.validate_python(json.loads(line[6:])))
    return events


async def test_a_run_as_agui_events(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted(tool_script()), tools=[lookup])
    app = create_app(
        store=store, agents={"helper": spec}, keys={"k": {"principal": "p", "prefix": "t:"}}
    )
    body = {
        "threadId": "thread-1",
        "runId": "client-run",
        "messages": [{"id": "m1", "role": "user", "content": "Weather in Paris?"}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    events = await _agui_events(app, body)
    kinds = [e.type for e in events]
    assert kinds[0] == EventType.RUN_STARTED and kinds[-1] == EventType.RUN_FINISHED
    assert kinds[1:5] == [
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.TOOL_CALL_RESULT,
    ]
    assert kinds[5] == EventType.TEXT_MESSAGE_START and kinds[-2] == EventType.TEXT_MESSAGE_END
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    stored = await store.load_entries("t:thread-1")  # the thread under the caller's prefix
    reply = stored[-1]
    assert isinstance(reply, MessageEntry) and text == reply.message.text()
    assert kinds.count(EventType.TEXT_MESSAGE_CONTENT) > 1, "the text streamed in pieces"
    result = events[4]
    assert isinstance(result, ToolCallResultEvent) and result.content == "sunny in Paris"


async def test_a_failed_run_ends_in_a_run_error_that_says_why(tmp_path: Path) -> None:
    refused = ModelError("upstream rejected the request (HTTP 400)", retryable=False)
    spec = AgentSpec(model=scripted([Reply(error=refused)]))
    keys = {"k": {"principal": "p", "prefix": "t:"}}
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec}, keys=keys)
    body = {
        "threadId": "thread-2",
        "runId": "client-run",
        "messages": [{"id": "m1", "role": "user", "content": "Hello?"}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    events = await _agui_events(app, body)
    end = events[-1]
    assert isinstance(end, RunErrorEvent), events
    assert end.code == "ModelError"
    assert end.message == "the run failed: ModelError: upstream rejected the request (HTTP 400)"


async def test_the_run_is_the_inputs_run_id_and_a_resent_input_starts_no_second_run(
    tmp_path: Path,
) -> None:
    """AG-UI's run is the one the input names (RUN_STARTED and RUN_FINISHED echo its runId),
    so a client resending an input whose answer it lost is answered by that run, not a new one
    asking the question again."""
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Hello there."), Reply(text="never")]))
    keys = {"k": {"principal": "p", "prefix": "t:"}}
    app = create_app(store=store, agents={"helper": spec}, keys=keys)
    body = {
        "threadId": "thread-3",
        "runId": "3f0c9a52-client-run",
        "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    for _ in range(2):
        events = await _agui_events(app, body)
        assert isinstance(events[0], RunStartedEvent) and events[0].run_id == body["runId"]
        assert isinstance(events[-1], RunFinishedEvent) and events[-1].run_id == body["runId"]
    stored = await store.load_entries("t:thread-3")
    texts = [e.message.text() for e in stored if isinstance(e, MessageEntry)]
    assert texts == ["Hi", "Hello there."]


def test_each_restarted_reply_streams_as_a_message_of_its_own_id() -> None:
    """A model call retried twice starts its reply over twice: three messages, three IDs (a
    client merges messages of one ID)."""
    translation = Translation("thread", "run", "run")
    started = []
    for restart in (False, True, True):
        delta = {"run_id": "run", "entry_parent": "p", "text": "Hel", "restart": restart}
        for event in translation.frame(Frame("delta", delta)):
            if isinstance(event, TextMessageStartEvent):
                started.append(event.message_id)
    assert len(set(started)) == 3, started


async def test_an_input_whose_last_message_is_not_the_users_is_refused_and_asks_nothing(
    tmp_path: Path,
) -> None:
    """An AG-UI client sends the whole history each time; the run's input is its last message.
    One that ends in a tool result (a client-side tool's answer: this server calls none) or in
    the assistant's reply has no new question: it is refused before the stream, rather than the
    last user message further up, answered already, being asked again."""
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Hello there."), Reply(text="asked twice")]))
    keys = {"k": {"principal": "p", "prefix": "t:"}}
    app = create_app(store=store, agents={"helper": spec}, keys=keys)
    history: list[dict[str, Any]] = [{"id": "m1", "role": "user", "content": "Hi"}]
    body: dict[str, Any] = {"threadId": "thread-4", "runId": "run-1", "messages": history}
    await _agui_events(app, body)
    history.append({"id": "a1", "role": "assistant", "content": "Hello there."})
    ends = [history, [*history, {"id": "t1", "role": "tool", "content": "42", "toolCallId": "c"}]]
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for n, messages in enumerate(ends):
            body = {"threadId": "thread-4", "runId": f"run-{n + 2}", "messages": messages}
            answer = await client.post("/v1/agui", json=body, headers={"Authorization": "Bearer k"})
            assert answer.status_code == 400, answer.text
            assert "last message" in answer.json()["error"]["message"]
    stored = await store.load_entries("t:thread-4")
    texts = [e.message.text() for e in stored if isinstance(e, MessageEntry)]
    assert texts == ["Hi", "Hello there."]


def test_a_cancelled_run_finishes_cancelled_not_in_error() -> None:
    """A run stopped (a person's cancel) did not fail: AG-UI ends it with ``RUN_FINISHED`` of the
    ``cancelled`` outcome, so a client does not show a stop it asked for as an error."""
    translation = Translation("thread", "run", "input-run")
    events = translation.frame(Frame("run", {"run_id": "run", "status": "cancelled"}))
    assert len(events) == 1 and isinstance(events[0], RunFinishedEvent), events
    assert events[0].run_id == "input-run"
    assert isinstance(events[0].outcome, RunFinishedCancelledOutcome)


def test_a_replys_tool_calls_belong_to_the_message_its_text_streamed_as() -> None:
    """A reply that says something and calls a tool is one assistant message to the client: the
    calls' ``parentMessageId`` is the ID its text streamed under (an AG-UI client files a call
    under another ID as a message of its own)."""
    translation = Translation("thread", "run", "run")
    delta = {"run_id": "run", "entry_parent": "p", "text": "Let me look.", "restart": False}
    [start, _] = translation.frame(Frame("delta", delta))
    assert isinstance(start, TextMessageStartEvent)
    reply = MessageEntry(
        id="e1",
        parent_id="p",
        message=assistant_message(
            TextContent(text="Let me look."), ToolCall(id="c1", name="lookup", arguments={})
        ),
    )
    events = translation.frame(Frame("entry", {"seq": 2, "entry": entry_to_wire(reply)}))
    calls = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert [c.parent_message_id for c in calls] == [start.message_id]


T = TypeVar("T")


class DiskGoneAt(SwitchedDisk):
    """A FileStore whose disk is gone for its ``at``-th append alone: a run's write fails, the
    reads after work."""

    def __init__(self, root: Path, at: int) -> None:
        super().__init__(root)
        self.at, self.appends = at, 0

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        plain = super().append_entries
        await self._counted(lambda: plain(session_id, entries))

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """What a run started through the server stores its input with: an append too."""
        guarded = super().append_if_last
        return await self._counted(lambda: guarded(session_id, entries, last_id))

    async def _counted(self, append: Callable[[], Awaitable[T]]) -> T:
        self.appends += 1
        if self.appends != self.at:
            return await append()
        self.down()
        try:
            return await append()
        finally:
            self.up()


async def test_a_run_its_store_failed_ends_in_a_run_error_naming_nothing_of_the_server(
    tmp_path: Path,
) -> None:
    """The store failing a run's write ends the run: its ``RUN_ERROR`` says the store is
    unavailable, as a 503 does, without the store's path (the client may be another
    company's front-end)."""
    store = DiskGoneAt(tmp_path / "private-root", at=2)  # the question's append works
    spec = AgentSpec(model=scripted([Reply(text="Hello there.")]))
    keys = {"k": {"principal": "p", "prefix": "t:"}}
    app = create_app(store=store, agents={"helper": spec}, keys=keys)
    body = {
        "threadId": "thread-5",
        "runId": "run-1",
        "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
    }
    events = await _agui_events(app, body)
    end = events[-1]
    assert isinstance(end, RunErrorEvent), events
    assert "private-root" not in end.message, end.message
    assert end.code == "StoreUnavailableError" and "unavailable" in end.message


async def test_a_run_quiet_for_long_keeps_its_stream_alive(tmp_path: Path) -> None:
    """A tool call that takes minutes (or waits for a person) left the AG-UI stream silent,
    and a proxy closes a connection silent for a minute: a comment line comes after each
    ``keepalive`` seconds of nothing, as on the session stream, which AG-UI clients skip."""
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text="Opened.")]), tools=[gate.tool]
    )
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"a": spec}, keepalive=0.2)
    body = {
        "threadId": "quiet",
        "runId": "quiet-run",
        "messages": [{"id": "m1", "role": "user", "content": "Open it."}],
        "tools": [],
        "context": [],
        "state": None,
        "forwardedProps": None,
    }
    lines: list[str] = []
    async with (
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
        asyncio.timeout(60),
        client.stream("POST", "/v1/agui", json=body) as response,
    ):
        async for line in response.aiter_lines():
            lines.append(line)
            if line.startswith(":") and gate.started.is_set():
                gate.release.set()  # a comment came while the call held the run
    assert ": keepalive" in lines
    events = [EVENTS.validate_python(json.loads(x[6:])) for x in lines if x.startswith("data: ")]
    assert events[0].type == EventType.RUN_STARTED and events[-1].type == EventType.RUN_FINISHED


def _snapshot_roles(events: Sequence[Event]) -> list[tuple[str, str | None]]:
    [snapshot] = [e for e in events if isinstance(e, MessagesSnapshotEvent)]
    shown: list[tuple[str, str | None]] = []
    for m in snapshot.messages:
        said = m.content if isinstance(m.content, str) else None
        calls = getattr(m, "tool_calls", None) or []
        shown.append((m.role, said or ",".join(c.function.name for c in calls)))
    return shown


async def test_an_input_sent_again_after_its_run_ended_is_answered_with_the_reply(
    tmp_path: Path,
) -> None:
    """A client that lost its answer sends the input again, as a cut stream's RUN_ERROR tells
    it to: its stream carries what the run stored (a MESSAGES_SNAPSHOT of the transcript), not
    only RUN_STARTED and RUN_FINISHED around nothing."""
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Hello there."), Reply(text="never")]))
    app = create_app(store=store, agents={"helper": spec})
    body = {
        "threadId": "again",
        "runId": "again-run",
        "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
    }
    first = await _agui_events(app, body)
    assert not [e for e in first if isinstance(e, MessagesSnapshotEvent)], "a new run: none"
    again = await _agui_events(app, body)
    assert _snapshot_roles(again) == [("user", "Hi"), ("assistant", "Hello there.")]
    assert isinstance(again[1], MessagesSnapshotEvent) and isinstance(again[-1], RunFinishedEvent)


async def test_an_input_sent_again_mid_run_shows_what_came_before_and_follows_on(
    temporal: Client | None, tmp_path: Path
) -> None:
    """A stream cut while a tool runs: the input sent again shows the stored call (in the
    snapshot), then the rest of the run live, each thing once."""
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text="Opened.")]), tools=[gate.tool]
    )
    body = {
        "threadId": "cut",
        "runId": "cut-run",
        "messages": [{"id": "m1", "role": "user", "content": "Open it."}],
    }
    async with helper_client(temporal, tmp_path, spec) as (client, _):
        async with client.stream("POST", "/v1/agui", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and "TOOL_CALL_END" in line:
                    break  # the client goes away while the call holds the run
        await asyncio.wait_for(gate.started.wait(), 30)
        again: list[Event] = []
        async with client.stream("POST", "/v1/agui", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                again.append(EVENTS.validate_python(json.loads(line[6:])))
                if isinstance(again[-1], MessagesSnapshotEvent):
                    gate.release.set()
    assert _snapshot_roles(again) == [("user", "Open it."), ("assistant", "gate")]
    kinds = [e.type for e in again]
    assert EventType.TOOL_CALL_START not in kinds, "the call was in the snapshot"
    assert kinds.count(EventType.TOOL_CALL_RESULT) == 1
    text = "".join(e.delta for e in again if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "Opened." and kinds[-1] == EventType.RUN_FINISHED


def test_a_reply_streaming_as_the_client_comes_back_shows_its_text_so_far() -> None:
    """The text a reply streamed before the client came back opens its message, so the
    stored reply's text is shown whole, not from the middle."""
    translation = Translation("thread", "run", "run", seq=1)
    so_far = {"run_id": "run", "entry_parent": "q", "text": "Hello ", "restart": True}
    opened = translation.catch_up([], [so_far])
    said = assistant_message(TextContent(text="Hello there."))
    reply = MessageEntry(id="e2", parent_id="q", message=said)
    later = translation.frame(Frame("entry", {"seq": 2, "entry": entry_to_wire(reply)}))
    shown = [e.delta for e in [*opened, *later] if isinstance(e, TextMessageContentEvent)]
    assert "".join(shown) == "Hello there."
