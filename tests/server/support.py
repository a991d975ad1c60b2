"""A real uvicorn server around ``create_app`` in the test's event loop, and an SSE reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent import ScriptedModel, tool
from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import Entry, SeqStore, Store
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import FAST, running_worker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def serving(app: FastAPI, port: int | None = None, grace: int = 1) -> AsyncIterator[str]:
    """``app`` on a real uvicorn server on ``port`` (else a free loopback port); yields its
    base URL. A server stopping ends the SSE streams of *every* server of the process
    (sse-starlette takes the server that holds the process's SIGTERM handler for the one
    exiting), so a test stops a server only once the streams it still reads have ended.
    ``grace``: seconds a stop gives requests in flight (``serve`` gives 5)."""
    port = port or free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=grace,  # open streams do not hold the test up
        # a test's client may idle for a minute between two requests: uvicorn closing the
        # connection (after 5 s by default) just as the client reuses it is an HTTP race a
        # browser retries and httpx reports (ReadError), not the server's behaviour under test
        timeout_keep_alive=300,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def helper_app(
    temporal: Client | None,
    store: Store,
    spec: AgentSpec,
    worker_store: Callable[[], Store],
    others: Mapping[str, AgentSpec] | None = None,
) -> AsyncIterator[FastAPI]:
    """An app whose agent ``helper`` runs ``spec`` (and ``others``, by name): in process
    (``temporal`` ``None``), or on a worker of this test on a queue of its own, with a store
    object of its own (``worker_store()``), as a worker process would have."""
    worker: AbstractAsyncContextManager[object] = nullcontext()
    agents = {"helper": spec, **(others or {})}
    if temporal is None:
        app = create_app(store=store, agents=agents)
    else:
        queue = f"test-{uuid.uuid4().hex[:12]}"
        app = create_app(store=store, temporal=temporal, task_queue=queue, agents=list(agents))
        runs = app.state.server.runs
        assert isinstance(runs, TemporalRuns)
        runs.executor.timeouts = FAST
        worker = running_worker(temporal, worker_store(), agents, task_queue=queue)
    async with worker:
        yield app


@asynccontextmanager
async def never_reading(url: str, method: str, path: str, body: bytes = b"") -> AsyncIterator[None]:
    """A client that sends one request (a JSON ``body`` if any) on a socket with a 4 KiB
    receive buffer and never reads: what the server sends fills both sockets' buffers, as with
    a laptop lid closed. The socket is closed on exit."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, (host, int(port)))
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        await loop.sock_sendall(sock, f"{head}\r\n".encode() + body)
        yield
    finally:
        sock.close()


@asynccontextmanager
async def replica(
    app: FastAPI, temporal: Client, store: Store
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """Another server of ``app``'s deployment (its Temporal task queue and agents) on ``store``,
    another store object, as another process has: nothing but the store and Temporal shared.
    Served; the app and a client of it."""
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    queue = runs.executor.task_queue
    other = create_app(store=store, temporal=temporal, task_queue=queue, agents=runs.agents)
    other.state.server.runs.executor.timeouts = FAST
    async with serving(other) as url, httpx.AsyncClient(base_url=url) as client:
        yield other, client


@asynccontextmanager
async def helper_client(
    temporal: Client | None,
    tmp_path: Path,
    spec: AgentSpec,
    others: Mapping[str, AgentSpec] | None = None,
) -> AsyncIterator[tuple[httpx.AsyncClient, FileStore]]:
    """:func:`helper_app` on a FileStore under ``tmp_path``, served; a client of it and the
    server's store."""
    store = FileStore(tmp_path / "sessions")
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(store.root), others) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        yield client, store


@dataclass
class Frame:
    event: str
    data: Any
    id: str | None = None


@dataclass
class Reader:
    """Frames of one stream as they come (``frames``), read by a task until closed."""

    frames: list[Frame] = field(default_factory=list)
    comments: int = 0
    """Keep-alive comments."""
    live: bool = False
    """The ``: live`` comment came: what a join sends came before it."""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def entries(self) -> list[tuple[int, dict[str, Any]]]:
        return [(f.data["seq"], f.data["entry"]) for f in self.frames if f.event == "entry"]

    def last_seq(self) -> int:
        seqs = [s for s, _ in self.entries()]
        return seqs[-1] if seqs else 0

    async def until(self, check: Any, within: float = 20.0) -> None:
        """Wait until ``check(self)`` holds (woken by each frame)."""
        async with asyncio.timeout(within):
            while not check(self):
                self.arrived.clear()
                await self.arrived.wait()


async def read_sse(response: httpx.Response, reader: Reader) -> None:
    """Parse ``text/event-stream`` into ``reader`` until the response ends."""
    await read_sse_lines(response.aiter_lines(), reader)


async def read_sse_lines(lines: AsyncIterable[str], reader: Reader) -> None:
    """Parse the lines of a ``text/event-stream`` into ``reader`` until they end."""
    event = "message"
    data: list[str] = []
    ident: str | None = None
    async for line in lines:
        if line == ": live":
            reader.live = True
            reader.arrived.set()
        elif line.startswith(":"):
            reader.comments += 1
            reader.arrived.set()
        elif line == "":
            if data:
                reader.frames.append(Frame(event, json.loads("\n".join(data)), ident))
                reader.arrived.set()
            event, data, ident = "message", [], None
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                ident = value
    reader.arrived.set()


@asynccontextmanager
async def stream(
    client: httpx.AsyncClient,
    session_id: str,
    *,
    after: int | None = None,
    last_event_id: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[Reader]:
    """A reader of the session's stream while the block runs (the connection closes after);
    ``last_event_id``: sent as the ``Last-Event-ID`` header, as a reconnecting browser does."""
    params = {} if after is None else {"after": str(after)}
    sent = dict(headers or {})
    if last_event_id is not None:
        sent["Last-Event-ID"] = str(last_event_id)
    reader = Reader()
    async with client.stream(
        "GET", f"/v1/sessions/{session_id}/stream", params=params, headers=sent, timeout=None
    ) as response:
        assert response.status_code == 200, await response.aread()
        task = asyncio.create_task(read_sse(response, reader))
        try:
            yield reader
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task


@tool
async def lookup(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


def tool_script(
    text: str = "It is sunny in Paris, a lovely day for a walk by the river.",
) -> list[Reply]:
    """A question answered after one tool call, the reply streamed in small pieces."""
    return [
        Reply.call("lookup", {"city": "Paris"}, id="call-1"),
        Reply(text=text, chunk_size=4, chunk_delay=0.03),
    ]


def scripted(replies: list[Reply]) -> ScriptedModel:
    return ScriptedModel(list(replies))


def ended(run_id: str) -> Any:
    """A check for :meth:`Reader.until`: the run's end came on the stream."""

    def check(reader: Reader) -> bool:
        return any(
            f.event == "run"
            and f.data["run_id"] == run_id
            and f.data["status"] in ("completed", "failed", "cancelled")
            for f in reader.frames
        )

    return check


def replied(page: Any, text: str) -> Callable[[], Awaitable[bool]]:
    """A probe for ``eventually``: a stored (not live) assistant message on the chat page
    contains ``text``."""

    async def probe() -> bool:
        texts = await page.locator(".msg.assistant:not(.live)").all_inner_texts()
        return any(text in t for t in texts)

    return probe


def quiet(page: Any) -> Callable[[], Awaitable[bool]]:
    """A probe for ``eventually``: the chat page's status line says nothing. A run's end comes
    after its reply (a read of the store later; on Temporal a workflow task later), so a page
    that shows the reply may rightly still say the run works."""

    async def probe() -> bool:
        return bool(await page.get_by_role("status").inner_text() == "")

    return probe


def live_text(reader: Reader, run_id: str | None = None) -> str:
    """The text the ``delta`` frames on ``reader`` build (of ``run_id``'s reply, if given)."""
    text = ""
    for frame in reader.frames:
        piece = frame.data
        if frame.event == "delta" and run_id in (None, piece["run_id"]):
            text = piece["text"] if piece["restart"] else text + piece["text"]
    return text


def live_until_its_entry(
    reader: Reader, reply_id: str, text: str, run_id: str | None = None
) -> str:
    """Check that the reply's live text on ``reader`` is the start of ``text`` (the reply's)
    and that none comes after its entry ``reply_id``; return that live text. On Temporal the
    last pieces may come as the entry only: the run's stream reads the live text and the hub
    reads the entry from the store apart, and the hub drops a reply's text once it sent the
    entry (under load the entry often comes first)."""
    at = next(
        i
        for i, f in enumerate(reader.frames)
        if f.event == "entry" and f.data["entry"]["id"] == reply_id
    )
    assert not [
        f for f in reader.frames[at:] if f.event == "delta" and run_id in (None, f.data["run_id"])
    ], "live text after its reply's entry"
    shown = live_text(reader, run_id)
    assert shown and text.startswith(shown), (shown, text)
    return shown


class HubReadsHeld:
    """Holds the session hubs' store reads while ``go`` is clear (a hub that falls behind the run);
    every other read (the routes', a run's own stream's) goes through. Installed before the
    first stream, so the hub's follower reads through it."""

    def __init__(self, store: SeqStore, app: FastAPI) -> None:
        self.hubs = app.state.server.hubs
        self.inner = store.load_entries_after
        self.go = asyncio.Event()
        self.go.set()
        store.load_entries_after = self.read  # type: ignore[method-assign]

    async def read(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        hub = self.hubs.hubs.get(session_id)
        if hub is not None and asyncio.current_task() is hub.task:
            await self.go.wait()
        return await self.inner(session_id, after, limit)
