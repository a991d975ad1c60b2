"""Outages: the Temporal server restarted mid-run on its SQLite file, and the store briefly
unavailable; runs complete after recovery with every entry exactly once
(docs/design.md#cancellation)."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from durable_agent import (
    CorruptSessionError,
    PersistError,
    Reply,
    ScriptedModel,
    StoreUnavailableError,
    model,
    new,
    tool,
)
from durable_agent.session import Entry, MessageEntry, Store
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, connect, run_stream, run_workflow_id
from tests.durable_runs.test_approvals import DECIDED_TURN
from tests.support.temporal import running_worker, temporal_binary
from tests.temporal.helpers import (
    assert_one_chain,
    assert_receipts_stored,
    assert_replays,
    consume,
    eventually,
    executor,
    messages_of,
    queue,
    run_id,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """A private ``temporal server start-dev`` on a SQLite file (never the session's server)."""

    def __init__(self, db: Path, log: Path) -> None:
        self.db = db
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    temporal_binary("temporal"),
                    "server",
                    "start-dev",
                    "--headless",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--db-filename",
                    str(self.db),
                    "--sqlite-pragma",
                    "journal_mode=wal",
                    "--sqlite-pragma",
                    "synchronous=normal",
                    "--log-level",
                    "warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    async def ready(self, within: float = 30.0) -> Client:
        async def probe() -> Client:
            client = await connect(self.address)
            await client.service_client.check_health()
            return client

        return await eventually(probe, within=within, interval=0.1, what="the dev server")


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_server_killed_and_restarted_mid_run(dev_server: DevServer, tmp_path: Path) -> None:
    client = await dev_server.ready()
    gate, started = asyncio.Event(), asyncio.Event()
    calls = 0

    @tool
    async def slow(n: int) -> str:
        """Runs until the test opens the gate."""
        nonlocal calls
        calls += 1
        started.set()
        await gate.wait()
        return f"slow {n} done"

    lm = ScriptedModel([Reply.call("slow", {"n": 1}, id="s1"), "finished"])
    store, q = FileStore(tmp_path / "sessions"), queue()
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=[slow])}, task_queue=q
    ):
        agent = await new("a", store=store, session_id=sid("restart"), executor=executor(client, q))
        rid = run_id()
        seen = asyncio.create_task(consume(await agent.run("go", run_id=rid)))
        await asyncio.wait_for(started.wait(), 20)

        dev_server.kill()
        gate.set()  # the tool finishes while the server is down
        dev_server.start()
        await dev_server.ready()

        outcome = await asyncio.wait_for(seen, 60)
        assert outcome.error is None, repr(outcome.error)
        await assert_replays(client, run_workflow_id(agent.session_id, rid))

    stored = await FileStore(tmp_path / "sessions").load_entries(agent.session_id)
    assert [m.role for m in messages_of(stored)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert messages_of(stored)[2].text() == "slow 1 done"
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    assert [e.id for e in outcome.receipts()] == [e.id for e in stored]
    assert agent.leaf_id == stored[-1].id
    assert calls in (1, 2)  # re-run only if its completion was lost with the server


async def test_a_run_waiting_for_approval_survives_a_server_restart(
    dev_server: DevServer, tmp_path: Path
) -> None:
    """The wait is durable: the server restarts on its SQLite file (same port) while the run
    waits for a person; the decision made afterwards reaches the same run, which runs the call
    and finishes (docs/design.md#approvals-and-steering)."""
    client = await dev_server.ready()
    sent: list[str] = []

    @tool(approval=True)
    async def send_email(to: str) -> str:
        """Send an email (a person approves each one)."""
        sent.append(to)
        return f"sent to {to}"

    lm = ScriptedModel([Reply.call("send_email", {"to": "team"}, id="e1"), "done"])
    store, q = FileStore(tmp_path / "sessions"), queue()
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=[send_email])}, task_queue=q
    ):
        agent = await new("a", store=store, session_id=sid("wait"), executor=executor(client, q))
        rid = run_id()
        seen = asyncio.create_task(consume(await agent.run("mail the team", run_id=rid)))
        waiting = lambda s: s.status == "awaiting_approval"  # noqa: E731
        await wait_state(client, agent.session_id, rid, waiting, what="the wait")

        async def seen_here() -> bool:  # the handle follows the run's entries from the store
            return [p.tool_call_id for p in agent.pending_approvals()] == ["e1"]

        await eventually(seen_here, what="the request at the handle")

        dev_server.kill()
        dev_server.start()
        await dev_server.ready()

        state = await wait_state(client, agent.session_id, rid, waiting, within=60)
        assert [p.tool_call_id for p in state.pending_approvals] == ["e1"]
        assert sent == []
        await agent.decide("e1", True, decided_by="ops")
        outcome = await asyncio.wait_for(seen, 60)
        assert outcome.error is None, repr(outcome.error)
        await assert_replays(client, run_workflow_id(agent.session_id, rid))

    assert sent == ["team"]
    stored = await FileStore(tmp_path / "sessions").load_entries(agent.session_id)
    kinds = [
        e.message.role if isinstance(e, MessageEntry) else getattr(e, "kind", e.type)
        for e in stored
    ]
    assert kinds == DECIDED_TURN
    assert messages_of(stored)[-2].text() == "sent to team"
    assert_one_chain(stored)
    assert "approval_decided" in outcome.types()


class FlakyStore:
    """A store whose next ``fail_appends`` appends raise ``error`` (after ``armed`` is set)."""

    def __init__(self, inner: Store, error: Exception) -> None:
        self.inner = inner
        self.error = error
        self.fail_appends = 0
        self.attempts = 0

    async def create_session(self, session_id: str, parent_id: str | None = None) -> Any:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        self.attempts += 1
        if self.fail_appends:
            self.fail_appends -= 1
            raise self.error
        await self.inner.append_entries(session_id, entries)


async def test_store_briefly_unavailable_then_the_run_completes(temporal_client: Client) -> None:
    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    memory = MemoryStore()
    store = FlakyStore(memory, StoreUnavailableError("connection refused"))
    lm = ScriptedModel([Reply.call("echo", {"text": "hi"}, id="e1"), "done", "more done"])
    q = queue()
    async with running_worker(
        temporal_client, store, {"a": AgentSpec(model=lm, tools=[echo])}, task_queue=q
    ):
        agent = await new(
            "a", store=memory, session_id=sid("flaky"), executor=executor(temporal_client, q)
        )
        store.fail_appends = 2  # the input's append fails twice, then the store is back
        outcome = await consume(await agent.run("go"))
        assert outcome.error is None, repr(outcome.error)
        store.fail_appends = 1  # and once for the next run's first append
        again = await consume(await agent.run("more"))
        assert again.error is None, repr(again.error)

    stored = await memory.load_entries(agent.session_id)
    assert [m.role for m in messages_of(stored)] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "user",
        "assistant",
    ]
    assert_one_chain(stored)
    assert_receipts_stored(outcome, stored)
    # failed + good appends of each run (the server spaces retries about 1 s apart)
    assert store.attempts == (2 + 4) + (1 + 2)
    assert len(lm.requests) == 3


async def test_other_store_errors_fail_the_run_at_once(temporal_client: Client) -> None:
    memory = MemoryStore()
    error = CorruptSessionError("s", "damaged line", line=3)
    store = FlakyStore(memory, error)
    lm = ScriptedModel(["never stored"])
    q = queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=memory, session_id=sid("corrupt"), executor=executor(temporal_client, q)
        )
        store.fail_appends = 1
        with pytest.raises(PersistError) as caught:
            await (await agent.run("go")).wait()
    assert store.attempts == 1  # not retried
    assert await memory.load_entries(agent.session_id) == []
    assert lm.requests == []

    # the same error in-process
    local_store = FlakyStore(MemoryStore(), error)
    local = await new(model(ScriptedModel(["x"])), store=local_store)
    local_store.fail_appends = 1
    with pytest.raises(PersistError) as local_caught:
        await (await local.run("go")).wait()
    assert str(caught.value) == str(local_caught.value)


class ReadsFailOnceStored:
    """The client's store: its next ``failures`` reads that would bring ``text`` fail as a
    store that is briefly down does (the worker writes through another object)."""

    def __init__(self, inner: Store, text: str, failures: int) -> None:
        self.inner = inner
        self.text = text
        self.failures = failures

    async def create_session(self, session_id: str, parent_id: str | None = None) -> Any:
        return await self.inner.create_session(session_id, parent_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        await self.inner.append_entries(session_id, entries)

    async def load_entries(self, session_id: str) -> list[Entry]:
        entries = await self.inner.load_entries(session_id)
        if self.failures and self.text in [m.text() for m in messages_of(entries)]:
            self.failures -= 1
            raise StoreUnavailableError("connection reset")
        return entries


async def test_a_read_that_fails_as_the_run_ends_loses_no_event(
    temporal_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The run stream's reads that would bring the reply fail until after the run ended: the
    stream reads again before it gives up, so the reply still has its receipt (before, the
    stream re-synced the handle and its events lacked the reply's ``message_end``)."""
    memory = MemoryStore()
    flaky = ReadsFailOnceStored(memory, "the reply", failures=4)
    q = queue()
    lm = ScriptedModel(["the reply"])
    async with running_worker(temporal_client, memory, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=flaky, session_id=sid("read-fails"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))

    assert outcome.error is None, repr(outcome.error)
    assert flaky.failures == 0  # the reads did fail
    assert [m.text() for m in messages_of(outcome.receipts())] == ["go", "the reply"]
    assert outcome.recorded_types()[-3:] == ["message_end", "turn_end", "agent_end"]
    assert [m.text() for m in outcome.messages or []] == ["the reply"]
    assert "followed another chain" not in caplog.text


async def test_a_store_down_past_the_run_end_leaves_the_next_run_on_the_reply(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store stays down after the run ended (the stream's catch-up and the handle's re-sync
    both fail): the stream raises, and the handle's next run adopts the run's stored entries
    before it starts, so it goes on from the reply (before, it started from the question and
    left the reply on a branch the model never saw again)."""
    monkeypatch.setattr(run_stream, "CATCH_UP_WITHIN", 0.2)
    memory = MemoryStore()
    flaky = ReadsFailOnceStored(memory, "the reply", failures=10**6)
    q = queue()
    lm = ScriptedModel(["the reply", "the next reply"])
    async with running_worker(temporal_client, memory, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=flaky, session_id=sid("down-past-end"), executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("go"))
        assert isinstance(outcome.error, StoreUnavailableError), repr(outcome.error)
        flaky.failures = 0  # the store is back
        again = await consume(await agent.run("and then?"))
        assert again.error is None, repr(again.error)

    stored = await memory.load_entries(agent.session_id)
    assert_one_chain(stored)
    assert [m.text() for m in messages_of(stored)] == [
        "go",
        "the reply",
        "and then?",
        "the next reply",
    ]
    assert [e.id for e in agent.entries()] == [e.id for e in stored]
    assert [m.text() for m in lm.requests[1].messages] == ["go", "the reply", "and then?"]


async def test_a_run_start_with_the_store_down_raises_store_unavailable(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The FileStore's directory goes (a file in its place) between a handle's open and its
    first run: ``run()`` raises ``StoreUnavailableError`` (the one retryable store error),
    starts no workflow and leaves the handle idle; once the store is back the same handle's run
    goes on from what the session held. It raised the OS's ``NotADirectoryError``, untyped,
    from the check that the queue's workers use the client's store."""
    root = tmp_path / "s"
    lm, q = ScriptedModel(["the reply"]), queue()
    async with running_worker(
        temporal_client, FileStore(root), {"a": AgentSpec(model=lm)}, task_queue=q
    ):
        agent = await new(
            "a",
            store=FileStore(root),
            session_id=sid("down"),
            executor=executor(temporal_client, q),
        )
        await agent.append("kept")
        root.rename(tmp_path / "away")
        root.write_text("not a directory")
        with pytest.raises(StoreUnavailableError, match="file store"):
            await agent.run("go", run_id="r1")
        assert not agent.running
        with pytest.raises(RPCError):  # never started
            await temporal_client.get_workflow_handle(
                run_workflow_id(agent.session_id, "r1")
            ).describe()
        root.unlink()
        (tmp_path / "away").rename(root)
        outcome = await consume(await agent.run("go"))
        assert outcome.error is None, repr(outcome.error)
    stored = await FileStore(root).load_entries(agent.session_id)
    assert [m.text() for m in messages_of(stored)] == ["kept", "go", "the reply"]
    assert lm.requests and [m.text() for m in lm.requests[0].messages] == ["kept", "go"]


async def test_a_refused_publish_start_is_logged_as_one_line_naming_the_error(
    temporal_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Temporal refusing the start of the publish workflow (here: a namespace it does not have)
    is an outage, not a bug: one WARNING line naming the error's type and message, as the server
    logs one, and ``new()`` still opens the handle. It was a full traceback of the SDK's call."""
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    elsewhere = Client(
        temporal_client.service_client,
        namespace=missing,
        data_converter=temporal_client.data_converter,
    )
    caplog.set_level(logging.WARNING, logger="durable_agent.temporal")
    agent = await new(
        "a", store=MemoryStore(), session_id=sid("pub"), executor=executor(elsewhere, queue())
    )
    [record] = [r for r in caplog.records if "publish workflow" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    key = f"session_init:{agent.session_id}:"
    assert record.getMessage().startswith(f"could not start the publish workflow for {key}")
    assert record.getMessage().endswith(f": RPCError: Namespace {missing} is not found.")
