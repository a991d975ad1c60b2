"""The order a session stream tells a run: a run's end only after every entry the run stored,
even when the store's reads fall behind the run, in process and on Temporal, on FileStore and
MongoStore."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.ai import Message, Reply, TextContent, ToolCall
from durable_agent.server import create_app
from durable_agent.session import Entry, MessageEntry, SeqStore, StoreUnavailableError
from durable_agent.session.codec import entry_to_wire
from durable_agent.session.ids import new_id
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    HubReadsHeld,
    Reader,
    ended,
    helper_app,
    lookup,
    scripted,
    serving,
    stream,
)
from tests.support.gate_tool import GateTool


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SeqStore:
    """A new store object on the test's FileStore root or Mongo database (several objects on
    one place: a worker's and a server's)."""
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    from durable_agent.stores.mongo import MongoStore

    return MongoStore(request.getfixturevalue("mongo_database"))


class Reads:
    """Watches the server's seq reads (``load_entries_after``); while ``down`` each fails with
    ``StoreUnavailableError``, as a store does that does not answer in time. Installed before
    the server's first stream, so its followers read through it."""

    def __init__(self, store: SeqStore) -> None:
        self.inner = store.load_entries_after
        self.down = False
        self.begun = 0
        self.done = 0
        """The number (in order of beginning) of the latest read that returned or failed."""
        self._done = asyncio.Event()
        store.load_entries_after = self.read  # type: ignore[method-assign]  # spies on the store

    async def read(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        self.begun += 1
        number = self.begun
        try:
            if self.down:
                raise StoreUnavailableError("the store did not answer in time")
            result: list[tuple[int, Entry]] = await self.inner(session_id, after, limit)
            return result
        finally:
            self.done = max(self.done, number)
            self._done.set()

    async def one_more(self) -> None:
        """Until a read that begins from now on has returned (or failed)."""
        since = self.begun
        while self.done <= since:
            self._done.clear()
            await self._done.wait()


def _told_in_order(reader: Reader, run_id: str, total: int) -> None:
    frames = [(f.event, f.data.get("seq", f.data.get("status"))) for f in reader.frames]
    end = next(
        i
        for i, f in enumerate(reader.frames)
        if f.event == "run" and f.data["run_id"] == run_id and f.data["status"] == "completed"
    )
    last = max(i for i, f in enumerate(reader.frames) if f.event == "entry")
    assert reader.last_seq() == total
    assert last < end, f"the run's end went out before its last entries: {frames}"


@asynccontextmanager
async def _server(
    temporal: Client | None,
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    spec: AgentSpec,
) -> AsyncIterator[tuple[FastAPI, SeqStore]]:
    """The app (runs in process, or on a worker of this test) and the store it reads."""
    store = _store(kind, tmp_path, request)
    # the worker's store object, not taken down
    async with helper_app(temporal, store, spec, lambda: _store(kind, tmp_path, request)) as app:
        yield app, store


class EndHeard:
    """Hears the server's streams being told a run ended (wraps the app's run listener)."""

    def __init__(self, app: FastAPI) -> None:
        hubs = app.state.server.hubs
        self.tell = hubs.run_status
        self.ended: set[str] = set()
        self._told = asyncio.Event()
        hubs.run_status = self.run_status

    def run_status(
        self, session_id: str, run_id: str, status: str, last: str = "", failure: Any = None
    ) -> None:
        self.tell(session_id, run_id, status, *([last] if last else []), failure=failure)
        if status in ("completed", "failed", "cancelled"):
            self.ended.add(run_id)
            self._told.set()

    async def of(self, run_id: str) -> None:
        while run_id not in self.ended:
            self._told.clear()
            await self._told.wait()


KINDS = ["file", pytest.param("mongo", marks=pytest.mark.mongo)]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_end_waits_for_the_runs_last_entries(
    temporal: Client | None, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The store stops answering the stream's reads just before the run stores its last
    entries and ends; the end is known while every read since has failed. The stream tells the
    end only once a read brought the run's last entry (a client that stops at the end has it)."""
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", {}, id="g1"), Reply(text="All done.")]),
        tools=[gate.tool],
    )
    async with (
        _server(temporal, kind, tmp_path, request, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        reads = Reads(store)
        heard = EndHeard(app)
        await client.post("/v1/sessions", json={"session_id": "o1"})
        async with stream(client, "o1", after=0) as reader:
            started = await client.post("/v1/sessions/o1/runs", json={"text": "Go"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            await gate.started.wait()
            reads.down = True  # the run's result and reply land unread
            gate.release.set()
            await heard.of(run_id)  # the streams know the run ended
            await reads.one_more()  # a read since the end was known failed
            reads.down = False
            total = len(await store.load_entries("o1"))
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == total)
        _told_in_order(reader, run_id, total)
        stored = [entry_to_wire(e) for e in await store.load_entries("o1")]
        assert reader.entries() == list(enumerate(stored, 1))


@pytest.mark.mongo
async def test_an_end_waits_for_an_append_in_flight_before_the_runs_last_entries(
    mongo_database: Any,
) -> None:
    """Another writer took its place in the session's log and has not stored its entry yet
    when the run stores its last entries and ends: a MongoStore seq read stops at that place
    (what lies after it could still move). The stream tells the end only once the read got
    past it to the run's last entry."""
    from durable_agent.stores.mongo import MongoStore

    store, other = MongoStore(mongo_database), MongoStore(mongo_database)
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", {}, id="g1"), Reply(text="All done.")]),
        tools=[gate.tool],
    )
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        reads, heard = Reads(store), EndHeard(app)
        await client.post("/v1/sessions", json={"session_id": "o2"})
        async with stream(client, "o2", after=0) as reader:
            started = await client.post("/v1/sessions/o2/runs", json={"text": "Go"})
            run_id = started.json()["run_id"]
            await gate.started.wait()
            await reader.until(lambda r: r.entries())
            placed, go = asyncio.Event(), asyncio.Event()
            insert = other._writer._insert

            async def in_flight(docs: list[dict[str, Any]]) -> None:
                placed.set()  # its slot is taken: a reader stops before it
                await go.wait()
                await insert(docs)

            other._writer._insert = in_flight  # type: ignore[method-assign]
            note = MessageEntry(
                id=new_id(),
                parent_id=reader.entries()[0][1]["id"],
                message=Message(role="user", content=[TextContent(text="a note")]),
            )
            writing = asyncio.create_task(other.append_entries("o2", [note]))
            await placed.wait()
            gate.release.set()
            await heard.of(run_id)
            await reads.one_more()  # a read since the end was known stopped at the note
            go.set()
            await writing
            total = len(await store.load_entries("o2"))
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == total)
        _told_in_order(reader, run_id, total)


def _late_deltas(reader: Reader) -> list[tuple[int, str]]:
    """The ``delta`` frames (their index, text) that came after the ``entry`` frame of the
    stored reply they grow (one run: the reply under the same parent): none should."""
    answered: set[str] = set()
    late = []
    for i, frame in enumerate(reader.frames):
        if frame.event == "entry":
            entry = frame.data["entry"]
            if entry["type"] == "message" and entry["message"]["role"] == "assistant":
                answered.add(entry.get("parent_id") or "")
        elif frame.event == "delta" and frame.data["entry_parent"] in answered:
            late.append((i, frame.data["text"]))
    return late


async def test_no_delta_of_a_reply_comes_after_its_entry(
    temporal: Client | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A run of many streamed replies (each with a tool call, then the last): every delta of a
    reply comes before the entry that stores it, so a client that shows a run's live text
    until the entry arrives never shows a fragment after the stored reply."""
    turns = 12
    replies = [
        Reply(
            text=f"Looking up city number {n} for you now.",
            tool_calls=[ToolCall(id=f"c{n}", name="lookup", arguments={"city": f"C{n}"})],
            chunk_size=3,
            chunk_delay=0.002,
        )
        for n in range(turns)
    ]
    replies.append(Reply(text="That is all the cities, thank you.", chunk_size=3))
    spec = AgentSpec(model=scripted(replies), tools=[lookup])
    async with (
        _server(temporal, "file", tmp_path, request, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "d1"})
        async with stream(client, "d1", after=0) as reader:
            started = await client.post("/v1/sessions/d1/runs", json={"text": "Go"})
            assert started.status_code == 202, started.text
            await reader.until(ended(started.json()["run_id"]), within=60)
            total = len(await store.load_entries("d1"))
            await reader.until(lambda r: r.last_seq() == total)
    assert any(f.event == "delta" for f in reader.frames)
    assert _late_deltas(reader) == []


async def test_a_stream_joined_after_a_reply_was_stored_shows_no_text_of_it(
    temporal: Client | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A run streamed a reply, stored it and now runs a tool. A client that joins then (from
    the start, or resuming after the reply's seq) gets the stored reply and none of its live
    text after it: the text is stored, not streaming."""
    gate = GateTool()
    reply = Reply(
        text="Let me open the gate for you.",
        tool_calls=[ToolCall(id="g1", name="gate", arguments={})],
        chunk_size=3,
        chunk_delay=0.01,
    )
    spec = AgentSpec(model=scripted([reply, Reply(text="Done.")]), tools=[gate.tool])
    async with (
        _server(temporal, "file", tmp_path, request, spec) as (app, _),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": "d2"})
        async with stream(client, "d2", after=0) as first:
            started = await client.post("/v1/sessions/d2/runs", json={"text": "Go"})
            await gate.started.wait()
            await first.until(lambda r: r.last_seq() == 2)
            for after in (0, 2):
                async with stream(client, "d2", after=after) as late:
                    await late.until(lambda r: r.live)
                assert [f.event for f in late.frames if f.event == "delta"] == []
            gate.release.set()
            await first.until(ended(started.json()["run_id"]), within=60)
    assert _late_deltas(first) == []


async def test_no_delta_comes_before_the_entry_it_hangs_off(
    temporal: Client | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The hub's reads fall behind a whole run: its first reply's live text waits for the
    run's input to be read, and its next reply's text comes while the first's still waits.
    When the reads catch up, each reply's text goes out after the entry it hangs off (the next
    reply's after the tool result), never with the reply before it."""
    replies = [
        Reply(
            text="Looking up Paris for you now.",
            tool_calls=[ToolCall(id="c1", name="lookup", arguments={"city": "Paris"})],
            chunk_size=4,
            chunk_delay=0.03,
        ),
        Reply(text="It is sunny in Paris today.", chunk_size=4, chunk_delay=0.03),
    ]
    spec = AgentSpec(model=scripted(replies), tools=[lookup])
    async with (
        _server(temporal, "file", tmp_path, request, spec) as (app, store),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        reads, heard = HubReadsHeld(store, app), EndHeard(app)
        await client.post("/v1/sessions", json={"session_id": "d3"})
        async with stream(client, "d3", after=0) as reader:
            await reader.until(lambda r: r.live)
            reads.go.clear()  # the hub reads nothing until the run is over
            started = await client.post("/v1/sessions/d3/runs", json={"text": "Go"})
            run_id = started.json()["run_id"]
            await heard.of(run_id)
            reads.go.set()
            await reader.until(ended(run_id), within=60)
            await reader.until(lambda r: r.last_seq() == 4)
    sent: set[str] = set()
    for frame in reader.frames:
        if frame.event == "entry":
            sent.add(frame.data["entry"]["id"])
        elif frame.event == "delta":
            assert frame.data["entry_parent"] in sent, f"a delta before its parent: {frame}"
    # in process the run's events give every delta; on Temporal the run's stream may read
    # the channel only after a reply is stored (no text of it then)
    assert temporal is not None or any(f.event == "delta" for f in reader.frames)
