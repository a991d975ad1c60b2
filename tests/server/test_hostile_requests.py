"""What a demanding client may send the HTTP API: reused run IDs, bogus resume points, bodies
without a length, refused starts, forged entries and unknown routes (docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from durable_agent import MessageEntry, ScriptedModel, tool
from durable_agent.ai import ModelRequest, Reply
from durable_agent.ai.messages import user_message
from durable_agent.server import create_app, sse
from durable_agent.server import hub as hub_module
from durable_agent.session.approvals import ApprovalDecision, ApprovalRequest
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, never_reading, serving, stream
from tests.support.polling import eventually

JSON = {"content-type": "application/json"}

released = asyncio.Event()
held = asyncio.Event()


@tool
async def hold() -> str:
    """Wait until the test lets the run go on."""
    held.set()
    await released.wait()
    return "let go"


def _reply(request: ModelRequest) -> Reply:
    """``hold`` for a question "hold" (the run then waits for the test), else a short answer."""
    last = request.messages[-1]
    if last.role == "user" and last.text() == "hold":
        return Reply.call("hold", {}, id="call-hold")
    return Reply(text="done")


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    held.clear()
    released.clear()
    spec = AgentSpec(model=ScriptedModel(_reply), tools=[hold])
    return create_app(store=FileStore(tmp_path / "sessions"), agents={"a": spec})


async def test_a_run_id_another_session_used_is_streamed_as_its_own(app: FastAPI) -> None:
    """Run IDs are the client's (``run_id``): the end of session a's run ``q-1`` says nothing of
    session b's run ``q-1``, which a stream joining while it goes shows from start to end."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "a"})
        async with stream(client, "a", after=0) as first:
            await first.until(lambda r: r.live)
            started = await client.post("/v1/sessions/a/runs", json={"text": "hi", "run_id": "q-1"})
            assert started.status_code == 202, started.text
            await first.until(ended("q-1"))

        async def statuses_of_b_q1() -> list[str]:
            """Session b's run ``q-1`` as a stream joining while it goes shows it."""
            held.clear()
            released.clear()
            body = {"text": "hold", "run_id": "q-1"}
            started = await client.post("/v1/sessions/b/runs", json=body)
            assert started.status_code == 202, started.text
            await asyncio.wait_for(held.wait(), 20)
            async with stream(client, "b", after=0) as reader:
                await reader.until(lambda r: r.live)
                released.set()
                await reader.until(ended("q-1"))
            return [f.data["status"] for f in reader.frames if f.event == "run"]

        assert await statuses_of_b_q1() == ["started", "completed"]
        # deleted, then created again by a run of the same ID: a new run, streamed alike
        assert (await client.delete("/v1/sessions/b")).status_code == 204
        assert await statuses_of_b_q1() == ["started", "completed"]


async def test_a_resume_point_past_the_session_is_refused(app: FastAPI) -> None:
    """A ``Last-Event-ID`` (or ``?after=``) past the session's last entry (another session's,
    or one deleted since) is refused before any byte: resumed there, the client would see
    nothing until the session grew past it, nor would any stream sharing the session's hub."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "r"})
        async with stream(client, "r", after=0) as first:
            await first.until(lambda r: r.live)
            await client.post("/v1/sessions/r/runs", json={"text": "hi", "run_id": "r1"})
            await first.until(ended("r1"))
            await first.until(lambda r: r.last_seq() == 2)
        for seq in ("3", "99"):
            refused = await client.get("/v1/sessions/r/stream", headers={"Last-Event-ID": seq})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["type"] == "InvalidLastEventIdError"
        refused = await client.get("/v1/sessions/r/stream", params={"after": "3"})
        assert refused.status_code == 400, refused.text
        async with stream(client, "r", last_event_id=2) as resumed:  # the last entry: live
            await resumed.until(lambda r: r.live)
            async with stream(client, "r", after=1) as other:
                await other.until(lambda r: r.live)
                await client.post("/v1/sessions/r/runs", json={"text": "again", "run_id": "r2"})
                await other.until(ended("r2"))
                await other.until(lambda r: r.last_seq() == 4)
            await resumed.until(lambda r: r.last_seq() == 4)
        assert [s for s, _ in other.entries()] == [2, 3, 4]
        assert [s for s, _ in resumed.entries()] == [3, 4]


async def test_a_chunked_body_over_the_limit_is_a_413(app: FastAPI, tmp_path: Path) -> None:
    """A body sent without its length (chunked) is held to the payload limit as one with it:
    413 ``PayloadTooLargeError``, nothing stored; one under the limit is taken as usual."""

    async def chunks(total: int) -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(total // 100_000):
            yield b"x" * 100_000
        yield b'"}'

    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        r = await client.post("/v1/sessions/big/runs", content=chunks(2_000_000), headers=JSON)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["type"] == "PayloadTooLargeError"
        r = await client.post("/v1/sessions/small/runs", content=chunks(100_000), headers=JSON)
        assert r.status_code == 202, r.text
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == ["small.jsonl"]


AGUI = {"runId": "r", "state": {}, "tools": [], "context": [], "forwardedProps": {}}


async def test_a_refused_run_start_creates_no_session(app: FastAPI, tmp_path: Path) -> None:
    """A run from an entry a new session cannot have, or by an agent the server has not, is
    refused before the session is created (a refused request stores nothing)."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        r = await client.post("/v1/sessions/n1/runs", json={"text": "hi", "leaf_id": "nope"})
        assert r.status_code == 404 and r.json()["error"]["type"] == "EntryNotFoundError"
        question = [{"id": "m1", "role": "user", "content": "hi"}]
        r = await client.post(
            "/v1/agui/nobody", json={"threadId": "n2", "messages": question, **AGUI}
        )
        assert r.status_code == 422 and r.json()["error"]["type"] == "UnknownAgentError"
        for sid in ("n1", "n2"):
            assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404
    assert list((tmp_path / "sessions").glob("*.jsonl")) == []


async def test_a_start_with_nothing_to_ask_creates_no_session(app: FastAPI, tmp_path: Path) -> None:
    """A run start whose input the run would refuse (a blank message, no input on a new
    session) answers 400 ``InvalidRunInputError`` before the session is created, over AG-UI
    too: a refused request stores nothing."""
    blank = [{"id": "m1", "role": "user", "content": "  "}]
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for sid, r in [
            ("e1", await client.post("/v1/sessions/e1/runs", json={"text": " "})),
            ("e2", await client.post("/v1/sessions/e2/runs", json={"inputs": []})),
            ("e3", await client.post("/v1/sessions/e3/runs", json={"inputs": [], "leaf_id": ""})),
            (
                "e4",
                await client.post("/v1/agui", json={"threadId": "e4", "messages": blank, **AGUI}),
            ),
        ]:
            assert r.status_code == 400, (sid, r.text)
            assert r.json()["error"]["type"] == "InvalidRunInputError", (sid, r.text)
            assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404, sid
    assert list((tmp_path / "sessions").glob("*.jsonl")) == []


async def test_an_input_no_store_can_hold_is_a_typed_400_naming_it(
    app: FastAPI, tmp_path: Path
) -> None:
    """JSON text may escape a lone surrogate (``"\\ud800"``), which Python's parser takes and
    no store can write, and spell a number past a float's range (``1e400``: infinity): an input
    entry holding either answers 400 ``EntryEncodeError`` naming the client's entry, and the
    session is not created."""
    note = '{"type": "custom", "id": "note-1", "created_at": "2025-01-01T00:00:00Z", "kind": "n"'
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for data, said in [('"a\\ud800"', "lone surrogate"), ("1e400", "infinity")]:
            body = f'{{"inputs": [{note}, "data": {data}}}]}}'
            r = await client.post("/v1/sessions/u1/runs", content=body.encode(), headers=JSON)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["type"] == "EntryEncodeError", error
            assert "'note-1'" in error["message"] and said in error["message"], error
        assert (await client.get("/v1/sessions/u1")).status_code == 404
    assert list((tmp_path / "sessions").glob("*.jsonl")) == []


async def test_a_blank_message_into_a_running_run_is_refused(app: FastAPI) -> None:
    """A blank message sent into the working run (``POST .../messages``, or a start that
    becomes a message) is refused as a run's input is: 400 ``InvalidRunInputError``; the run
    stores no empty question for the model (nor for every later run of the session)."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        started = await client.post("/v1/sessions/m/runs", json={"text": "hold", "run_id": "h"})
        assert started.status_code == 202, started.text
        await asyncio.wait_for(held.wait(), 20)
        async with stream(client, "m", after=0) as reader:
            await reader.until(lambda r: r.live)
            for path, body in [
                ("messages", {"text": " \n"}),
                ("messages", {"text": "", "when": "at_end"}),
                ("runs", {"text": "  ", "on_busy": "next_turn"}),
            ]:
                r = await client.post(f"/v1/sessions/m/{path}", json=body)
                assert r.status_code == 400, (path, body, r.text)
                assert r.json()["error"]["type"] == "InvalidRunInputError", r.text
            released.set()
            await reader.until(ended("h"))
        read = await client.get("/v1/sessions/m/entries")
        users = [e["entry"]["message"] for e in read.json()["entries"] if "message" in e["entry"]]
        asked = [m["content"][0]["text"] for m in users if m["role"] == "user"]
        assert asked == ["hold"]


async def test_approval_entries_come_only_through_the_approvals_routes(
    app: FastAPI, tmp_path: Path
) -> None:
    """A run's ``inputs`` cannot carry a decision (its ``decided_by`` is the caller's principal,
    set by ``POST .../approvals/{call}``) nor a request (a call no model made): 400, nothing
    stored."""
    decision = ApprovalDecision(id="d1", tool_call_id="c1", approved=True, decided_by="admin")
    request = ApprovalRequest(id="q1", tool_call_id="c1", tool_name="hold", args={}, run_id="x")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for entry in (decision, request):
            body = {"inputs": [entry_to_wire(entry)]}
            r = await client.post("/v1/sessions/forged/runs", json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["type"] == "EntryDecodeError"
    assert list((tmp_path / "sessions").glob("*.jsonl")) == []


async def test_an_unknown_route_or_method_answers_the_error_body(app: FastAPI) -> None:
    """Every refused request answers ``{"error": {"type", "message"}}``, a path or a method the
    API does not have too."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for method, path, status, kind in [
            ("GET", "/v1/nothing", 404, "NotFoundError"),
            ("GET", "/nothing.js", 404, "NotFoundError"),
            ("GET", "/v1/sessions/", 404, "NotFoundError"),  # no redirect to the API's path
            ("PUT", "/v1/sessions/s1", 405, "MethodNotAllowedError"),
            ("POST", "/v1/nothing", 405, "MethodNotAllowedError"),
        ]:
            r = await client.request(method, path, json={})
            assert r.status_code == status, (method, path, r.text)
            assert r.json()["error"]["type"] == kind, (method, path, r.text)
            assert r.json()["error"]["message"]
        # a method a path of the API has not: 405 naming the methods it has (not the chat
        # page's answer for a file it has not)
        for method, path, allowed in [
            ("GET", "/v1/sessions/s1/runs/r1/cancel", {"POST"}),
            ("PUT", "/v1/sessions/s1", {"GET", "DELETE"}),
            ("PATCH", "/v1/sessions", {"GET", "POST"}),
        ]:
            r = await client.request(method, path)
            assert r.status_code == 405, (method, path, r.text)
            assert r.json()["error"]["type"] == "MethodNotAllowedError", r.text
            assert set(r.headers["allow"].split(", ")) == allowed, (method, path, r.headers)
        page = await client.get("/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert (await client.get("/app.js")).status_code == 200
        deep = b"[" * 100_000 + b"]" * 100_000  # deeper than the JSON parser goes
        r = await client.post("/v1/sessions", content=deep, headers=JSON)
        assert r.status_code == 400 and r.json()["error"]["type"] == "MalformedJSONError"


async def test_a_client_that_stops_reading_is_dropped_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that opens the stream and never reads fills the socket: the send timeout drops
    it, an ordinary event logged in one line (no traceback), and the session's hub lets it go."""
    # a piece may wait for a loaded box's event loop (which the client here shares) well over
    # the 15 ms it takes to read: the timeout is long beside that, short beside the frame's 6 s
    monkeypatch.setattr(sse, "SEND_TIMEOUT", 2.0)
    monkeypatch.setattr(hub_module, "LINGER", 0.0)
    caplog.set_level(logging.INFO)
    store = FileStore(tmp_path / "sessions")
    await store.create_session("big")
    bulky = "x" * 1_000_000  # a replay of megabytes: more than both sockets buffer
    entries = [
        MessageEntry(id=f"e{i}", parent_id=f"e{i - 1}" if i else None, message=user_message(bulky))
        for i in range(16)
    ]
    for entry in entries:  # one a call: a call's batch has a limit of its own
        await store.append_entries("big", [entry])
    app = create_app(store=store, agents={"a": AgentSpec(model=ScriptedModel([]))})
    hubs = app.state.server.hubs
    uvicorn_log = logging.getLogger("uvicorn.error")  # not the root's: uvicorn configures it
    async with serving(app) as url:
        uvicorn_log.addHandler(caplog.handler)  # once uvicorn configured it
        async with never_reading(url, "GET", "/v1/sessions/big/stream?after=0"):

            async def dropped() -> bool:
                return "big" not in hubs.hubs and any(
                    "stopped reading" in r.getMessage() for r in caplog.records
                )

            await eventually(dropped, within=20, what="the stalled stream dropped")
    uvicorn_log.removeHandler(caplog.handler)
    noted = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "httpx"]
    assert len(noted) == 1 and noted[0].exc_info is None, [r.getMessage() for r in noted]


async def test_a_client_reading_a_big_entry_slowly_keeps_its_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry of megabytes is one frame; a client that reads it steadily but takes longer
    than the send timeout for all of it (a slow link) is still reading: it gets the whole
    frame and goes live. The timeout covered the whole frame, so such a client was dropped, came
    back with ``Last-Event-ID`` to the same frame, and never got past it."""
    # a piece may wait for a loaded box's event loop (which the client here shares) well over
    # the 15 ms it takes to read: the timeout is long beside that, short beside the frame's 6 s
    monkeypatch.setattr(sse, "SEND_TIMEOUT", 2.0)
    store = FileStore(tmp_path / "sessions")
    await store.create_session("big")
    entry = MessageEntry(id="e0", message=user_message("x" * 12_000_000))
    await store.append_entries("big", [entry])
    app = create_app(store=store, agents={"a": AgentSpec(model=ScriptedModel([]))})
    loop = asyncio.get_running_loop()
    async with serving(app) as url:
        host, port = url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 262_144)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, int(port)))
        request = f"GET /v1/sessions/big/stream?after=0 HTTP/1.1\r\nHost: {host}\r\n\r\n"
        await loop.sock_sendall(sock, request.encode())
        received = bytearray()
        try:
            async with asyncio.timeout(60):
                while b": live" not in received[-200:]:
                    piece = await loop.sock_recv(sock, 65_536)
                    assert piece, f"dropped after {len(received)} bytes"
                    received += piece
                    await asyncio.sleep(0.03)  # a slow link: about 2 MB/s at most
        finally:
            sock.close()
    assert received.count(b"x" * 1000) >= 11_000  # the whole entry came


async def test_a_json_body_sent_as_another_type_is_told_to_say_json(
    app: FastAPI, tmp_path: Path
) -> None:
    """``curl -d '{"text": "hi"}'`` sends a form's type: the body was refused with 422 "body:
    Input should be a valid dictionary", which the body is. It is 415, naming the type to
    send, and nothing is stored; a route without a body takes a request of any type."""
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        body = b'{"text": "hi"}'
        for kind in ["application/x-www-form-urlencoded", "text/plain", None]:
            headers = {"content-type": kind} if kind else {}
            for path in ["/v1/sessions/s1/runs", "/v1/sessions/s1/messages"]:
                r = await client.post(path, content=body, headers=headers)
                assert r.status_code == 415, (kind, path, r.text)
                assert r.json()["error"]["type"] == "UnsupportedMediaTypeError", r.text
                assert "Content-Type: application/json" in r.json()["error"]["message"]
            r = await client.post("/v1/sessions", content=b'{"session_id": "s2"}', headers=headers)
            assert r.status_code == 415, (kind, r.text)
        assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir())
        typed = {"content-type": "application/vnd.api+json; charset=utf-8"}
        assert (await client.post("/v1/sessions/s1/runs", content=body, headers=typed)).is_success
        plain = {"content-type": "text/plain"}
        assert (await client.post("/v1/sessions", headers=plain)).status_code == 201
        # a body of JSON's type that is not an object is the body's fault: 422, as before
        r = await client.post("/v1/sessions/s1/runs", json=["hi"])
        assert r.status_code == 422, r.text
