"""A session deleted and created again elsewhere stays deleted for a worker that remembers it
(docs/design.md#worker-memory): a run from a leaf of the deleted session fails before any write,
its conversation never reaches the model, whatever the worker remembers.

The delete and the re-create go around the worker's memory, as another process's would (the
CLI's ``sessions rm``, a second worker): straight on the store the worker wraps.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from durable_agent import Agent, Reply, ScriptedModel, StoreUnavailableError, new, tool
from durable_agent.ai.messages import user_message
from durable_agent.cli.run import refuse_busy
from durable_agent.durable.errors import EntryNotFoundError, RunActiveError
from durable_agent.durable.stream import RunStream
from durable_agent.server import create_app
from durable_agent.server.hubs import Hubs
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import MessageEntry, SessionNotFoundError, SessionRecord
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec, delete_session_workflows, run_workflow_id
from durable_agent.workflows.search import CREATED_MEMO, running_runs
from tests.durable_runs.test_approvals import email, send_email
from tests.server.support import serving
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    consume,
    event_types,
    eventually,
    executor,
    messages_of,
    queue,
    sid,
    wait_state,
)

pytestmark = pytest.mark.temporal


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_stale_handle_after_delete_and_recreate_fails_before_any_write(
    temporal_client: Client, kind: str, tmp_path: Path
) -> None:
    store = MemoryStore() if kind == "memory" else FileStore(tmp_path / "s")
    lm, q = ScriptedModel(["the secret answer", "should never be asked"]), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("gone"), executor=executor(temporal_client, q)
        )
        first = await consume(await agent.run("a private question"))
        assert first.error is None, repr(first.error)
        assert len(lm.requests) == 1

        # "clear chat" in another process: deleted, and the ID taken again
        await store.delete_session(agent.session_id)
        await store.create_session(agent.session_id)

        stale = await consume(await agent.run("and now?"))
        assert isinstance(stale.error, (SessionNotFoundError, EntryNotFoundError)), repr(
            stale.error
        )
        assert len(lm.requests) == 1, "the deleted conversation was sent to the model"
        assert await store.load_entries(agent.session_id) == []


async def test_deleting_a_sessions_workflows_stops_its_running_run_first(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``delete_session_workflows`` (the CLI's ``sessions rm --workflows``, a library caller)
    cancels a run still going before it waits for it to end: its tool stops at once, the run
    calls the model no more, and the call returns well within ``settle``, instead of the run
    going on with the deleted conversation until Temporal terminates it ``settle`` later."""
    tool_started, stopped = asyncio.Event(), asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Runs until it is cancelled."""
        tool_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return "unreachable"

    script: list[Reply | str] = [Reply.call("wait_forever", id="w1"), "should never be asked"]
    lm, q, store = ScriptedModel(script), queue(), FileStore(tmp_path / "s")
    spec = AgentSpec(model=lm, tools=[wait_forever])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("rm"), executor=executor(temporal_client, q)
        )
        seen = asyncio.create_task(consume(await agent.run("a private question")))
        await asyncio.wait_for(tool_started.wait(), 20)
        await store.delete_session(agent.session_id)
        began = time.monotonic()
        await delete_session_workflows(temporal_client, agent.session_id, settle=30)
        took = time.monotonic() - began
        assert stopped.is_set(), "the deleted session's tool still runs"
        assert took < 10, took
        outcome = await asyncio.wait_for(seen, 20)
        assert outcome.error is not None
        assert len(lm.requests) == 1, "the deleted conversation was sent to the model again"


async def _a_run_awaiting_approval(
    client: Client, store: FileStore, q: str, session: str
) -> tuple[SessionRecord, Agent, RunStream]:
    """A new ``session`` whose run (on queue ``q``) waits for the approval of an email, once
    the busy check lists it: the session's record, its handle and the run's stream."""
    old = await store.create_session(session)
    agent = await new("a", store=store, session_id=session, executor=executor(client, q))
    stream = await agent.run("mail bob")
    await wait_state(client, session, stream.run_id, lambda s: s.status == "awaiting_approval")

    async def listed() -> bool:
        return await running_runs(client, session, old.created_at) == [stream.run_id]

    await eventually(listed, what="the waiting run is listed")
    return old, agent, stream


async def test_a_run_of_a_deleted_session_is_no_run_of_the_session_created_again(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``sessions rm`` without ``--workflows`` while a run waits for an approval, then the ID
    is created again: that run belongs to the deleted session, so the new one is not busy with
    it (the CLI's busy check, ``running_runs``), while it still counts for its own session.
    It was listed by the session ID alone, and refused every run of the new session."""
    store = FileStore(tmp_path / "s")
    lm, q = ScriptedModel([Reply(tool_calls=[email()]), "should never be asked"]), queue()
    spec = AgentSpec(model=lm, tools=[send_email])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        session = sid("again")
        old, agent, stream = await _a_run_awaiting_approval(temporal_client, store, q, session)
        with pytest.raises(RunActiveError):
            await refuse_busy(temporal_client, agent)

        elsewhere = FileStore(tmp_path / "s")  # sessions rm (no --workflows), then a create
        await elsewhere.delete_session(session)
        again = await elsewhere.create_session(session)
        assert again.created_at != old.created_at
        assert await running_runs(temporal_client, session, again.created_at) == []
        await refuse_busy(temporal_client, agent)  # not busy
        assert await running_runs(temporal_client, session) == [stream.run_id]  # no record
        await stream.cancel()


async def test_a_run_of_a_deleted_session_does_not_hold_its_id_before_it_is_created_again(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``sessions rm`` (no ``--workflows``) while a run waits for an approval: the ID has no
    session until a run creates it again (the CLI's ``run``, a server's run start), and that
    run is not refused as busy with the deleted session's run. Both busy checks, the CLI's
    and a server's, listed every run of the ID when it had no record, and refused the start
    until the old run ended (an hour of ``approval_wait``)."""
    store = FileStore(tmp_path / "s")
    lm, q = ScriptedModel([Reply(tool_calls=[email()])]), queue()
    spec = AgentSpec(model=lm, tools=[send_email])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        session = sid("gone")
        _, agent, stream = await _a_run_awaiting_approval(temporal_client, store, q, session)
        await store.delete_session(session)
        await refuse_busy(temporal_client, agent)  # not busy: no session holds the ID
        runs = TemporalRuns(temporal_client, q, store, Hubs(store, None), ["a"])
        assert await runs.active(session) == []
        assert await running_runs(temporal_client, session) == [stream.run_id]  # every run
        await stream.cancel()


class CountedStore(FileStore):
    """A FileStore that counts its reads of session records."""

    record_reads = 0

    async def load_session(self, session_id: str) -> SessionRecord:
        self.record_reads += 1
        return await super().load_session(session_id)


async def test_a_server_run_start_reads_the_session_record_once(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A server's busy check reads no session record while no run of the session is going,
    and its run start reads it once (the run's memo; its stream's follower takes that read):
    each read it three times, at every ``POST .../runs``. The memo still names the creation,
    and the busy check still finds the run going."""
    store, counted = FileStore(tmp_path / "s"), CountedStore(tmp_path / "s")
    lm, q = ScriptedModel([Reply(tool_calls=[email()])]), queue()
    spec = AgentSpec(model=lm, tools=[send_email])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        runs = TemporalRuns(temporal_client, q, counted, Hubs(counted, None), ["a"])
        session = sid("reads")
        assert await runs.active(session) == []
        assert counted.record_reads == 0
        old = await store.create_session(session)
        question = MessageEntry(message=user_message("mail bob"))
        run_id = await runs.start(session, [question], leaf_id=None, agent="a", on_busy="reject")
        assert counted.record_reads == 1
        await wait_state(
            temporal_client, session, run_id, lambda s: s.status == "awaiting_approval"
        )

        async def listed() -> bool:
            return await running_runs(temporal_client, session, old.created_at) == [run_id]

        await eventually(listed, what="the waiting run is listed as of its creation")
        assert await runs.active(session) == [run_id]
        await runs.cancel(session, run_id)
        await runs.aclose()


async def test_busy_checks_with_the_store_down_say_so_and_lose_nothing(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The busy checks read the session record once a run going names a creation: with the
    store down then (a FileStore's directory gone), the CLI's check raises
    ``StoreUnavailableError`` and the HTTP API answers 503 ``StoreUnavailableError`` to a run
    start (either ``on_busy``) and to the list of runs, with no stack; once the store is back
    the run still waits and the session is as busy as before."""
    root = tmp_path / "s"
    store = FileStore(root)
    lm, q = ScriptedModel([Reply(tool_calls=[email()])]), queue()
    spec = AgentSpec(model=lm, tools=[send_email])
    async with running_worker(temporal_client, FileStore(root), {"a": spec}, task_queue=q):
        session = sid("down")
        await store.create_session(session)  # the run's memo names its creation
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        stream = await agent.run("mail bob")
        await wait_state(
            temporal_client, session, stream.run_id, lambda s: s.status == "awaiting_approval"
        )
        app = create_app(store=store, agents=["a"], temporal=temporal_client, task_queue=q)
        async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
            path = f"/v1/sessions/{session}/runs"
            root.rename(tmp_path / "away")
            root.write_text("not a directory")
            with pytest.raises(StoreUnavailableError):
                await refuse_busy(temporal_client, agent)
            answers = [
                await client.post(path, json={"text": "hi"}),
                await client.post(path, json={"text": "hi", "on_busy": "next_turn"}),
                await client.get(path),
            ]
            for answer in answers:
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["type"] == "StoreUnavailableError"
                assert "Traceback" not in answer.text
            root.unlink()
            (tmp_path / "away").rename(root)
            with pytest.raises(RunActiveError):
                await refuse_busy(temporal_client, agent)
            assert (await client.get(path)).json() == {"active": [stream.run_id]}
            assert (await client.post(path, json={"text": "hi"})).status_code == 409
        await stream.cancel()
    assert [m.text() for m in messages_of(await store.load_entries(session))][:1] == ["mail bob"]


@pytest.mark.parametrize("start", ["creates-its-session", "operator", "client-memo"])
async def test_a_run_started_without_the_memo_names_its_sessions_creation(
    temporal_client: Client, tmp_path: Path, start: str
) -> None:
    """A run whose client set no memo (``new()`` + ``run()`` on a new ID, which creates the
    session in the run; an operator's start from the UI or CLI) names its session's creation
    once its store step knows it: ``sessions rm`` (no ``--workflows``) while it waits, the ID
    created again, and the new session is not busy with it. Without the memo it counted for
    every creation of the ID, and refused the new session's runs until it ended. A run whose
    client set the memo (the session existed) modifies nothing."""
    store = FileStore(tmp_path / "s")
    lm, q = ScriptedModel([Reply(tool_calls=[email()])]), queue()
    spec = AgentSpec(model=lm, tools=[send_email])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        session = sid("nomemo")
        if start != "creates-its-session":
            await store.create_session(session)
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        stream = None
        if start == "operator":
            run_id = "op1"
            handle = await temporal_client.start_workflow(
                "durable_agent.run",
                {"session_id": session, "agent": "a", "text": "mail bob"},
                id=run_workflow_id(session, run_id),
                task_queue=q,
            )
        else:
            stream = await agent.run("mail bob")
            run_id = stream.run_id
            handle = temporal_client.get_workflow_handle(run_workflow_id(session, run_id))
        await wait_state(
            temporal_client, session, run_id, lambda s: s.status == "awaiting_approval"
        )
        born = (await store.load_session(session)).created_at
        memo = await (await handle.describe()).memo_value(CREATED_MEMO, None)
        assert isinstance(memo, str) and datetime.fromisoformat(memo) == born
        upserts = event_types((await handle.fetch_history()).to_json()).count(
            "EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED"
        )
        assert upserts == (0 if start == "client-memo" else 1)

        async def listed() -> bool:
            return await running_runs(temporal_client, session, born) == [run_id]

        await eventually(listed, what="the waiting run is listed as of its creation")
        elsewhere = FileStore(tmp_path / "s")  # sessions rm (no --workflows), then a create
        await elsewhere.delete_session(session)
        again = await elsewhere.create_session(session)

        async def left_out() -> bool:
            return await running_runs(temporal_client, session, again.created_at) == []

        await eventually(left_out, what="the deleted session's run left out")
        await refuse_busy(temporal_client, agent)  # not busy
        await (handle.cancel() if stream is None else stream.cancel())
