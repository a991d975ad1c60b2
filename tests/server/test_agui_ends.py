"""An AG-UI stream the server ends before its run's end still ends in ``RUN_ERROR``, saying
why and what to do: an AG-UI client takes a stream that just stops for a broken run with no
explanation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path

import anyio
import httpx
import pytest
from ag_ui.core import Event, RunErrorEvent, RunStartedEvent
from pydantic import TypeAdapter
from temporalio.client import Client

from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.server import create_app, sse
from durable_agent.server import hub as hub_module
from durable_agent.server.agui import Translation, events
from durable_agent.session import MessageEntry
from durable_agent.session.approvals import PendingItem
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, helper_app, never_reading, scripted, serving, stream
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def _body(thread: str, run_id: str) -> dict[str, object]:
    return {
        "threadId": thread,
        "runId": run_id,
        "messages": [{"id": "m1", "role": "user", "content": "Open it."}],
    }


def _parsed(chunk: str) -> list[Event]:
    lines = chunk.splitlines()
    return [EVENTS.validate_python(json.loads(x[6:])) for x in lines if x.startswith("data: ")]


async def _read(response: httpx.Response, into: list[Event]) -> None:
    """The stream's AG-UI events into ``into`` until it ends (cut or not)."""
    with contextlib.suppress(httpx.HTTPError):  # a cut stream: what came before it counts
        async for line in response.aiter_lines():
            into.extend(_parsed(line))


async def test_a_server_stopping_mid_run_ends_the_stream_in_a_run_error_saying_what_holds(
    temporal: Client | None, tmp_path: Path
) -> None:
    """A deploy stops the server while a run's AG-UI stream is open: the stream ends in a
    ``ServerStopping`` ``RUN_ERROR`` that says what becomes of the run (in process it stops
    with the server; on Temporal it goes on, on its workers, and the same input follows it).
    The stream ended with neither ``RUN_FINISHED`` nor ``RUN_ERROR``."""
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text="Opened.")]
    spec = AgentSpec(model=scripted(replies), tools=[gate.tool])
    store = FileStore(tmp_path / "sessions")
    got: list[Event] = []
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(store.root)) as app,
        httpx.AsyncClient(timeout=60) as client,
        asyncio.timeout(60),
    ):
        server = serving(app, grace=5)  # as serve: a stream's end is sent within it
        url = await server.__aenter__()
        stopped = False
        try:
            async with client.stream("POST", f"{url}/v1/agui", json=_body("t", "r-1")) as answer:
                assert answer.status_code == 200, await answer.aread()
                reading = asyncio.create_task(_read(answer, got))
                await gate.started.wait()  # the run is mid-way, its stream open
                stopped = True
                await server.__aexit__(None, None, None)
                await reading
        finally:
            if not stopped:
                await server.__aexit__(None, None, None)
        gate.release.set()
        assert isinstance(got[0], RunStartedEvent), got
        end = got[-1]
        assert isinstance(end, RunErrorEvent), got
        assert end.code == "ServerStopping", end
        if temporal is None:
            assert "stops with the server" in end.message, end.message
        else:
            assert "goes on" in end.message and "runId" in end.message, end.message

            async def replied() -> bool:  # what the message says holds: the run went on
                stored = await store.load_entries("t")
                return any(
                    isinstance(e, MessageEntry) and e.message.text() == "Opened." for e in stored
                )

            await eventually(replied, within=30, what="the run's reply after the stop")


async def test_a_client_too_slow_for_its_run_gets_a_run_error_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AG-UI client that reads slower than its run's events come is let go past the hub's
    backlog (the store, not the server's memory, buffers for it): its stream ends in a
    ``TooSlow`` ``RUN_ERROR`` saying the run goes on and how to follow it, not in nothing.
    The stream's generator not pulled is what a client that does not read makes of it."""
    monkeypatch.setattr(hub_module, "BACKLOG", 20)
    text = "A long answer, streamed in very small pieces. " * 5
    spec = AgentSpec(model=scripted([Reply(text=text, chunk_size=3, chunk_delay=0.001)]))
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "slow"})
        srv = app.state.server
        hub = await srv.hubs.hub("slow", 0)
        queue, _, _ = hub.join()

        async def waiting() -> tuple[int, list[PendingItem]]:
            return 0, []

        translation = Translation("slow", "r-1", "r-1", local=True)
        agui = events(queue, hub.leave, translation, waiting, 15.0, anyio.Event())
        assert isinstance(_parsed((await anext(agui)).decode())[0], RunStartedEvent)
        async with stream(client, "slow", after=0) as reader:
            await reader.until(lambda r: r.live)
            started = await client.post(
                "/v1/sessions/slow/runs", json={"text": "Talk", "run_id": "r-1"}
            )
            await reader.until(ended(started.json()["run_id"]))
        rest = [e for chunk in [c async for c in agui] for e in _parsed(chunk.decode())]
    end = rest[-1] if rest else None
    assert isinstance(end, RunErrorEvent), rest
    assert end.code == "TooSlow" and "goes on" in end.message, end


async def test_a_stream_whose_hub_failed_ends_in_a_run_error_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's follower failing on a bug of ours (logged with its traceback) ends the
    AG-UI stream in a ``StreamFailed`` ``RUN_ERROR`` saying the run goes on, not in nothing."""
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text="Opened.")]
    spec = AgentSpec(model=scripted(replies), tools=[gate.tool])
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    got: list[Event] = []
    async with (
        serving(app) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        asyncio.timeout(60),
        client.stream("POST", "/v1/agui", json=_body("t", "r-1")) as answer,
    ):
        reading = asyncio.create_task(_read(answer, got))
        await gate.started.wait()
        hub = app.state.server.hubs.hubs["t"]

        async def broken() -> None:
            raise RuntimeError("a bug in the hub")

        hub._read = broken  # the run's next entry wakes it
        gate.release.set()
        await reading
    end = got[-1]
    assert isinstance(end, RunErrorEvent), got
    assert end.code == "StreamFailed" and "goes on" in end.message, end
    assert "a bug in the hub" in caplog.text


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


async def test_a_client_that_stops_reading_is_dropped_in_one_line_and_its_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An AG-UI client that posts its input and never reads fills the socket with its run's
    text: the send timeout drops it as it drops a stalled session stream, in one line (no
    traceback), and the hub lets its queue go; the run goes on to wait for its approval, and
    the decision finishes it. The stream held its response, queue and task until the socket
    failed."""
    monkeypatch.setattr(sse, "SEND_TIMEOUT", 2.0)  # as for the session stream's stalled client
    monkeypatch.setattr(hub_module, "LINGER", 0.0)
    caplog.set_level(logging.INFO)
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    bulky = Reply(text="x" * 16_000_000, tool_calls=[call], chunk_size=1_000_000)
    spec = AgentSpec(model=scripted([bulky, Reply(text="Sent.")]), tools=[send_email])
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": spec})
    hubs = app.state.server.hubs
    uvicorn_log = logging.getLogger("uvicorn.error")  # not the root's: uvicorn configures it
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        uvicorn_log.addHandler(caplog.handler)  # once uvicorn configured it
        body = json.dumps(_body("big", "r-1")).encode()
        async with never_reading(url, "POST", "/v1/agui", body):

            async def dropped() -> bool:
                return "big" not in hubs.hubs and any(
                    "stopped reading" in r.getMessage() for r in caplog.records
                )

            await eventually(dropped, within=20, what="the stalled AG-UI stream dropped")
        status = await client.get("/v1/sessions/big/runs/r-1")
        assert status.json()["status"] == "awaiting_approval", status.json()
        decided = await client.post("/v1/sessions/big/approvals/call-1", json={"approved": True})
        assert decided.status_code == 200, decided.text

        async def finished() -> bool:
            answer = await client.get("/v1/sessions/big/runs/r-1")
            return bool(answer.json()["status"] == "completed")

        await eventually(finished, within=20, what="the run's end after the decision")
    uvicorn_log.removeHandler(caplog.handler)
    stored = await store.load_entries("big")
    assert isinstance(stored[-1], MessageEntry) and stored[-1].message.text() == "Sent."
    noted = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "httpx"]
    assert len(noted) == 1 and noted[0].exc_info is None, [r.getMessage() for r in noted]
