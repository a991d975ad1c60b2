"""Live tokens on Temporal: the call_model activity publishes its streaming reply on
the store's delta channel, the client's run stream yields it as ``message_update`` events in the
in-process order, and none of it costs workflow history.

Real servers throughout: the Temporal dev server, FerretDB for MongoStore, FileStore on disk; the
crash test SIGKILLs a worker process mid-stream.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from temporalio.client import Client

from durable_agent import Event, Reply, RunStream, ScriptedModel, ToolCall, new, tool
from durable_agent.ai.messages import Message
from durable_agent.session import Store
from durable_agent.session.deltas import LiveStore
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.stores.file import FileDeltas
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import AgentSpec, run_stream, run_workflow_id
from tests.durable_runs.support import kinds
from tests.durable_runs.test_approvals import Reader
from tests.durable_runs.test_steering import queued
from tests.support.gate_tool import GateTool
from tests.support.gated_store import GatedStore, has_text
from tests.support.live_worker import AGENT, LIVE_TEXT, MARKER
from tests.support.polling import eventually
from tests.support.temporal import running_worker
from tests.temporal.conftest import ROOT, WorkerProcesses
from tests.temporal.helpers import (
    CRASH,
    Outcome,
    assert_one_chain,
    assert_replays,
    consume,
    event_types,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_for_file,
)

pytestmark = pytest.mark.temporal


def _store(kind: str, tmp_path: Path, mongo_database: AsyncDatabase[Any] | None) -> Store:
    if kind == "file":
        return FileStore(tmp_path / "sessions")
    assert mongo_database is not None
    return MongoStore(mongo_database)


@pytest.fixture(params=["file", "mongo"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def live_store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    database = request.getfixturevalue("mongo_database") if store_kind == "mongo" else None
    return _store(store_kind, tmp_path, database)


def replies(events: list[Event]) -> list[tuple[list[Event], Message]]:
    """Per assistant reply: its ``message_update`` events and its stored message, checking the
    in-process order (``message_start``, updates, then the ``message_end`` receipt)."""
    out: list[tuple[list[Event], Message]] = []
    updates: list[Event] | None = None
    for event in events:
        inner = event.agent
        assert inner is not None
        if inner.type == "message_update":
            assert updates is not None, "an update outside a message"
            updates.append(event)
            continue
        if inner.message is None or inner.message.role != "assistant":
            continue
        if inner.type == "message_start":
            assert updates is None
            updates = []
        elif inner.type == "message_end":
            assert updates is not None and event.entries
            out.append((updates, inner.message))
            updates = None
    return out


def concatenated(updates: list[Event]) -> str:
    """The text deltas joined; each update must extend the previous one (no duplicate, no
    out-of-order delta) unless it carries ``restart``, and its ``delta`` is what it adds (after a
    restart, the whole text so far): printing the deltas builds the same text."""
    text, printed = "", ""
    for event in updates:
        assert event.agent is not None and event.agent.message is not None
        new_text = event.agent.message.text()
        delta = event.agent.delta
        assert delta is not None, "an update without its delta"
        printed = delta if event.agent.restart else printed + delta
        assert printed == new_text, (printed, new_text)
        if event.agent.restart:
            text = new_text
            continue
        assert (new_text.startswith(text) and len(new_text) > len(text)) or new_text == text, (
            text,
            new_text,
        )
        assert new_text != text or event.agent.message.content != [], "an empty update"
        text = new_text
    return text


def _text(i: int) -> str:
    return f"Reply {i}: " + " ".join(f"token{j}" for j in range(24))


async def test_deltas_concatenate_to_the_stored_text_for_20_replies(
    temporal_client: Client, live_store: Store
) -> None:
    # each reply streams for about half a second, so the client (reading its deltas a few times
    # a second) sees it stream rather than stored whole, which correctly yields no deltas at all
    lm = ScriptedModel(
        [Reply(text=_text(i), chunk_size=6, chunk_delay=0.02, delay=0.1) for i in range(20)]
    )
    q = queue()
    agents = {"live": AgentSpec(model=lm)}
    async with running_worker(temporal_client, live_store, agents, task_queue=q):
        agent = await new(
            "live", store=live_store, session_id=sid("live"), executor=executor(temporal_client, q)
        )
        for i in range(20):
            outcome = await consume(await agent.run(f"question {i}"))
            assert outcome.error is None, repr(outcome.error)
            [(updates, message)] = replies(outcome.events)
            assert message.text() == _text(i)
            # streamed for real: several batches, none of them a restart
            assert len(updates) >= 2, (len(updates), outcome.types())
            assert not any(u.agent and u.agent.restart for u in updates)
            assert concatenated(updates) == message.text()
            assert outcome.messages == [message]
        stored = await live_store.load_entries(agent.session_id)
        assert [m.text() for m in messages_of(stored) if m.role == "assistant"] == [
            _text(i) for i in range(20)
        ]
        # bounded: the stored replies' deltas are removed (after the worker's grace period)
        await eventually(lambda: _empty(live_store, agent.session_id), within=20, what="cleared")


async def held(store: Store, session_id: str) -> int:
    """Deltas (MongoDB: documents; FileStore: side-file bytes) the store's channel holds."""
    assert isinstance(store, LiveStore)
    channel = store.live_deltas()
    if isinstance(channel, FileDeltas):
        return channel.size(session_id)
    assert isinstance(store, MongoStore)
    count: int = await store.live_deltas().size()
    return count


async def _empty(store: Store, session_id: str) -> bool:
    return await held(store, session_id) == 0


LONG = "The second reply streams slowly, so a client can attach while it is on its way. " * 2


def update_texts(updates: list[Event]) -> list[str]:
    return [u.agent.message.text() for u in updates if u.agent and u.agent.message]


async def test_a_worker_writing_less_often_streams_at_its_pace(
    temporal_client: Client, live_store: Store
) -> None:
    """A worker started with ``live_every=2`` writes a reply's deltas every 2 s, and the client
    reads in step: its updates come that far apart (the last, the reply's end, may come sooner),
    and still build the stored text."""
    text = " ".join(f"word{j:02d}" for j in range(56))  # streams for about 5 s
    lm = ScriptedModel([Reply(text=text, chunk_size=8, chunk_delay=0.1)])
    q = queue()
    async with running_worker(
        temporal_client, live_store, {"live": AgentSpec(model=lm)}, task_queue=q, live_every=2.0
    ):
        agent = await new(
            "live", store=live_store, session_id=sid("pace"), executor=executor(temporal_client, q)
        )
        loop = asyncio.get_running_loop()
        events: list[Event] = []
        times: list[float] = []
        async for event in (await agent.run("Go")).events():
            events.append(event)
            if event.agent is not None and event.agent.type == "message_update":
                times.append(loop.time())
    [(updates, message)] = replies(events)
    assert concatenated(updates) == message.text() == text
    assert len(updates) >= 3, len(updates)
    gaps = [b - a for a, b in itertools.pairwise(times[:-1])]  # the last: the reply's end
    assert gaps and min(gaps) >= 1.2, gaps  # a second apart at the default pace


async def test_a_late_client_gets_the_missed_deltas_of_the_streaming_reply_only(
    temporal_client: Client, live_store: Store
) -> None:
    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    lm = ScriptedModel(
        [
            Reply(
                text="Let me check that first.",
                tool_calls=[ToolCall(id="c1", name="noop", arguments={})],
                chunk_size=4,
                chunk_delay=0.1,
                delay=0.3,
            ),
            Reply(text=LONG, chunk_size=4, chunk_delay=0.06),
        ]
    )
    q, session, rid = queue(), sid("late"), run_id()
    agents = {"live": AgentSpec(model=lm, tools=[noop])}
    async with running_worker(temporal_client, live_store, agents, task_queue=q):
        a = await new(
            "live", store=live_store, session_id=session, executor=executor(temporal_client, q)
        )
        b = await new(
            "live", store=live_store, session_id=session, executor=executor(temporal_client, q)
        )
        seen: list[Event] = []
        streaming = asyncio.Event()

        async def read(stream: RunStream) -> list[Message]:
            starts = updates = 0
            async for event in stream.events():
                seen.append(event)
                inner = event.agent
                assert inner is not None
                if (
                    inner.type == "message_start"
                    and inner.message
                    and inner.message.role == "assistant"
                ):
                    starts, updates = starts + 1, 0
                updates += inner.type == "message_update"
                if starts == 2 and updates >= 3:
                    streaming.set()
            return await stream.wait()

        first = asyncio.create_task(read(await a.run("go", run_id=rid)))
        await asyncio.wait_for(streaming.wait(), 30)
        # a second client attaches to the same run while its second reply streams
        late = await consume(await b.run("ignored", run_id=rid))
        messages = await asyncio.wait_for(first, 30)
        # and a third once the run has ended: every reply is stored, so no deltas at all
        after = await consume(await a.run("ignored again", run_id=rid))

    assert late.error is None and after.error is None, (late.error, after.error)
    stored = await live_store.load_entries(session)
    assert_one_chain(stored)
    assistant = [m for m in messages_of(stored) if m.role == "assistant"]
    assert [m.text() for m in assistant] == ["Let me check that first.", LONG]
    assert messages == late.messages == after.messages == messages_of(stored)[1:]
    (a1, _), (a2, _) = replies(seen)
    (l1, _), (l2, m2) = replies(late.events)
    assert a1 and a2, "the first client saw both replies stream"
    assert l1 == [], "the late client gets no deltas for a reply already stored"
    # the missed deltas of the streaming reply, from its first (those already published come
    # as one update), then the rest as they are published
    assert len(l2) >= 2
    assert not any(u.agent and u.agent.restart for u in l2)
    assert concatenated(l2) == m2.text() == LONG
    assert [e for e in after.events if e.agent and e.agent.type == "message_update"] == []
    assert [e.agent.type for e in late.events if e.agent and e.agent.type != "message_update"] == [
        e.agent.type for e in seen if e.agent and e.agent.type != "message_update"
    ]


def start_live(procs: WorkerProcesses, *args: str) -> subprocess.Popen[bytes]:
    """A ``tests.support.live_worker`` process, stopped with the fixture's other workers."""
    log = (procs.logs / f"live-{len(procs.procs)}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.live_worker", *args],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    log.close()
    procs.procs.append(proc)
    return proc


async def _crash_mid_stream(
    client: Client,
    address: str,
    procs: WorkerProcesses,
    base: Path,
    mongo: tuple[str, AsyncDatabase[Any]] | None,
) -> None:
    root, markers, q = base / "sessions", base / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    if mongo is None:
        common += ["--root", str(root)]
        store: Store = FileStore(root)
    else:
        uri, database = mongo
        common += ["--mongo-uri", uri, "--mongo-db", database.name]
        store = MongoStore(database)
    first = start_live(procs, *common, "--crash")
    await wait_for_file(markers / f"ready-{first.pid}")
    session, rid = sid("crash-live"), run_id()
    agent = await new(
        AGENT, store=store, session_id=session, executor=executor(client, q, timeouts=CRASH)
    )
    stream = await agent.run("go", run_id=rid)
    seen = asyncio.create_task(consume(stream))
    await wait_for_file(markers / MARKER)
    procs.kill(first)  # SIGKILL while the reply streams
    start_live(procs, *common)
    outcome: Outcome = await asyncio.wait_for(seen, 60)
    assert outcome.error is None, repr(outcome.error)

    stored = await store.load_entries(session)
    assert [m.role for m in messages_of(stored)] == ["user", "assistant"]
    assert outcome.messages == messages_of(stored)[1:]
    [(updates, message)] = replies(outcome.events)
    assert message.text() == LIVE_TEXT
    restarts = [i for i, u in enumerate(updates) if u.agent and u.agent.restart]
    assert len(restarts) == 1, update_texts(updates)
    before, again = update_texts(updates[: restarts[0]]), update_texts(updates[restarts[0] :])
    # the killed attempt streamed part of the reply (its last batch may not have been written
    # before the kill); the retry starts it over: its first update (``restart``, whose delta is
    # its whole text, checked below) shows the retry's own text so far, which may already be as
    # long as what the killed attempt showed (a reader backed off while the call was retried)
    assert before and all(LIVE_TEXT.startswith(t) for t in before)
    assert again and all(LIVE_TEXT.startswith(t) for t in again)
    assert concatenated(updates) == LIVE_TEXT
    await assert_replays(client, run_workflow_id(session, rid))


async def test_a_worker_killed_mid_stream_restarts_the_deltas(
    temporal_client: Client,
    address: str,
    worker_processes: WorkerProcesses,
    tmp_path: Path,
    mongo_uri: str,
    mongo_database: AsyncDatabase[Any],
) -> None:
    await asyncio.gather(
        _crash_mid_stream(temporal_client, address, worker_processes, tmp_path / "f", None),
        _crash_mid_stream(
            temporal_client, address, worker_processes, tmp_path / "m", (mongo_uri, mongo_database)
        ),
    )


async def _history(client: Client, store: Store, live: bool) -> tuple[list[str], int]:
    """Event types of one two-turn run's history, and the updates its client saw."""

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    lm = ScriptedModel(
        [
            Reply(
                text=LONG,
                tool_calls=[ToolCall(id="c1", name="noop", arguments={})],
                chunk_size=8,
                chunk_delay=0.05,
                delay=0.3,
            ),
            Reply(text=LONG, chunk_size=8, chunk_delay=0.05, delay=0.3),
        ]
    )
    q, session, rid = queue(), sid("hist"), run_id()
    agents = {"live": AgentSpec(model=lm, tools=[noop])}
    async with running_worker(
        client, store, agents, task_queue=q, live_deltas="auto" if live else None
    ):
        agent = await new("live", store=store, session_id=session, executor=executor(client, q))
        outcome = await consume(await agent.run("go", run_id=rid))
    assert outcome.error is None, repr(outcome.error)
    history = await client.get_workflow_handle(run_workflow_id(session, rid)).fetch_history()
    updates = sum(1 for e in outcome.events if e.agent and e.agent.type == "message_update")
    return event_types(history.to_json()), updates


async def test_streaming_adds_no_history_events(temporal_client: Client, live_store: Store) -> None:
    on, updates_on = await _history(temporal_client, live_store, live=True)
    off, updates_off = await _history(temporal_client, live_store, live=False)
    assert updates_on >= 4 and updates_off == 0, (updates_on, updates_off)
    assert len(on) == len(off)
    assert on == off


async def test_a_tool_call_without_an_id_streams_without_a_restart(
    temporal_client: Client, tmp_path: Path
) -> None:
    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    store = FileStore(tmp_path / "sessions")
    call = ToolCall(id="", name="noop", arguments={})
    lm = ScriptedModel(
        [Reply(text=LONG, tool_calls=[call], chunk_size=8, chunk_delay=0.05, delay=0.3), "done"]
    )
    q = queue()
    agents = {"live": AgentSpec(model=lm, tools=[noop])}
    async with running_worker(temporal_client, store, agents, task_queue=q):
        agent = await new(
            "live", store=store, session_id=sid("noid"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))
    assert outcome.error is None, repr(outcome.error)
    (updates, message), _ = replies(outcome.events)
    [stored_call] = message.tool_calls()
    assert stored_call.id.startswith("call_")  # the worker gave the call its ID
    assert updates and not any(u.agent and u.agent.restart for u in updates)
    last = updates[-1].agent
    assert last is not None and last.message is not None
    assert last.message.content == message.content  # the last update is the stored reply


async def test_a_message_stored_before_a_streaming_reply_goes_out_before_its_turn(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client reads the session seldom (every 3 s here) and a steer is stored only after it
    read the turn's tool result: the next reply's first live delta arrives long before the
    client's next read. The client reads the store before that delta starts the turn, so the
    steer's ``input_delivered`` goes out before the ``turn_start``, as the engine records it,
    and the delta is not lost."""
    monkeypatch.setattr(run_stream, "FASTEST_READ", 3.0)
    monkeypatch.setattr(run_stream, "SLOWEST_READ", 3.0)
    memory, gate, q = MemoryStore(), GateTool(), queue()
    gated = GatedStore(memory)
    steered = "The steer arrived; this reply streams for about a second and a half. " * 2
    lm = ScriptedModel(
        [Reply.call("gate", id="g1"), Reply(text=steered, chunk_size=4, chunk_delay=0.04)]
    )
    agents = {"live": AgentSpec(model=lm, tools=[gate.tool])}
    async with running_worker(
        temporal_client, gated, agents, task_queue=q, live_deltas=memory.live_deltas()
    ):
        agent = await new(
            "live", store=memory, session_id=sid("order"), executor=executor(temporal_client, q)
        )
        stream = await agent.run("go")
        reader = Reader(stream)
        await asyncio.wait_for(gate.started.wait(), 30)
        sending = asyncio.ensure_future(stream.send("also this"))
        await queued(agent, client=temporal_client)
        gated.arm(has_text("also this"), before=True)
        gate.release.set()
        await reader.until("turn_end")  # the tool's result read; the steer not yet stored
        await asyncio.wait_for(gated.entered.wait(), 30)
        gated.release.set()
        await asyncio.wait_for(sending, 30)
        events = await reader.done()

    names = kinds(events, updates=False)
    first_end = names.index("turn_end")
    assert names[first_end + 1 : first_end + 4] == [
        "input_delivered",
        "turn_start",
        "message_start",
    ]
    [_, (updates, reply)] = replies(events)
    assert reply.text() == steered
    assert updates, "the reply streamed"
    assert concatenated(updates) == steered
