"""A request a client retries (a lost response, a double click) has its effect once, in process
and on Temporal: a run start names its run, and a start of a run the session has already answers
that run, while it goes and after it ended (its input is never stored twice nor delivered into
the run as a message); a message into the running run names itself, and the same message sent
again is delivered once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.session import MessageEntry, SessionRecord
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, helper_app, helper_client, scripted, serving, stream
from tests.support.gate_tool import GateTool


async def test_a_retried_start_is_one_run(temporal: Client | None, tmp_path: Path) -> None:
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text="Done."), Reply(text="Again.")]
    spec = AgentSpec(model=scripted(replies), tools=[gate.tool])
    async with helper_client(temporal, tmp_path, spec) as (client, store):
        sid = f"retry-{uuid.uuid4().hex[:8]}"
        start = {"text": "Do it.", "run_id": "first-try"}
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            first = await client.post(f"/v1/sessions/{sid}/runs", json=start)
            assert first.status_code == 202, first.text
            assert first.json() == {"run_id": "first-try"}
            await asyncio.wait_for(gate.started.wait(), 60)
            # retried while the run goes: that run, whatever the request says about a busy one
            for on_busy in ("reject", "next_turn", "at_end", "sibling"):
                again = await client.post(
                    f"/v1/sessions/{sid}/runs", json={**start, "on_busy": on_busy}
                )
                assert again.status_code == 202, again.text
                assert again.json() == {"run_id": "first-try"}
            gate.release.set()
            await reader.until(ended("first-try"), within=60)
            late = await client.post(f"/v1/sessions/{sid}/runs", json=start)
            assert late.status_code == 202 and late.json() == {"run_id": "first-try"}
            said = [m.message.text() for m in await _messages(store, sid)]
            assert said == ["Do it.", "", "Done."]  # one input, one turn: nothing started again
            other = await client.post(
                f"/v1/sessions/{sid}/runs", json={"text": "Once more.", "run_id": "second"}
            )
            assert other.json() == {"run_id": "second"}
            await reader.until(ended("second"), within=60)
        said = [m.message.text() for m in await _messages(store, sid)]
        assert said == ["Do it.", "", "Done.", "Once more.", "Again."]


async def test_a_retried_message_is_delivered_once(temporal: Client | None, tmp_path: Path) -> None:
    gate = GateTool()
    spec = AgentSpec(
        model=scripted(
            [Reply.call("gate", id="g1"), Reply(text="Noted."), Reply(text="Done too.")]
        ),
        tools=[gate.tool],
    )
    async with helper_client(temporal, tmp_path, spec) as (client, store):
        sid = f"retry-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Go.", "run_id": "run-1"})
            await asyncio.wait_for(gate.started.wait(), 60)
            steer = {"text": "Also this.", "message_id": "m-1"}
            follow = {"text": "And then that.", "on_busy": "at_end", "run_id": "m-2"}
            for _ in range(2):  # each request twice, its answer the same
                sent = await client.post(f"/v1/sessions/{sid}/messages", json=steer)
                assert sent.status_code == 202, sent.text
                assert sent.json() == {"run_id": "run-1", "message_id": "m-1"}
                queued = await client.post(f"/v1/sessions/{sid}/runs", json=follow)
                assert queued.status_code == 202, queued.text
                assert queued.json() == {"run_id": "run-1", "message_id": "m-2"}
            gate.release.set()
            await reader.until(ended("run-1"), within=60)
        said = [m.message.text() for m in await _messages(store, sid)]
        # each once: the steer after the tool's result, the follow-up at the run's end
        assert said == ["Go.", "", "Also this.", "Noted.", "And then that.", "Done too."]


async def test_a_message_sent_again_before_its_first_answer_is_delivered_once(
    temporal: Client | None, tmp_path: Path
) -> None:
    """Requests of one message (its ``message_id``) at once, a retry before the first one's
    answer (a client's timeout, a double click): each answered 202 naming the message, which
    is delivered once. In process each was handed to the run, the message stored again."""
    gate = GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text="Noted.")]), tools=[gate.tool]
    )
    async with helper_client(temporal, tmp_path, spec) as (client, store):
        sid = f"retry-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Go.", "run_id": "run-1"})
            await asyncio.wait_for(gate.started.wait(), 60)
            steer = {"text": "Also this.", "message_id": "m-1"}
            url = f"/v1/sessions/{sid}/messages"
            Together(store, 5)
            sent = await asyncio.gather(*(client.post(url, json=steer) for _ in range(5)))
            assert [(s.status_code, s.json()) for s in sent] == 5 * [
                (202, {"run_id": "run-1", "message_id": "m-1"})
            ]
            gate.release.set()
            await reader.until(ended("run-1"), within=60)
        said = [m.message.text() for m in await _messages(store, sid)]
        assert said == ["Go.", "", "Also this.", "Noted."]


class Together:
    """Holds the store's next ``requests`` session-record reads until all of them are made:
    requests sent at once reach the server's side (past their session's check) together."""

    def __init__(self, store: FileStore, requests: int) -> None:
        self.inner, self.left = store.load_session, requests
        self.all_in = asyncio.Event()
        store.load_session = self.read  # type: ignore[method-assign]

    async def read(self, session_id: str) -> SessionRecord:
        if self.left > 0:
            self.left -= 1
            if self.left == 0:
                self.all_in.set()
            await self.all_in.wait()
        return await self.inner(session_id)


async def _messages(store: FileStore, sid: str) -> list[MessageEntry]:
    entries = await store.load_entries(sid)
    return [e for e in entries if isinstance(e, MessageEntry) and e.message.role != "tool_result"]


async def test_a_run_id_that_could_not_name_a_run_is_refused(tmp_path: Path) -> None:
    spec = AgentSpec(model=scripted([Reply(text="never")]))
    async with helper_client(None, tmp_path, spec) as (client, store):
        for bad in ("../up", "a/b", "", "x" * 65, "sp ace"):
            refused = await client.post(
                "/v1/sessions/bad-ids/runs", json={"text": "hi", "run_id": bad}
            )
            assert refused.status_code == 422, (bad, refused.text)
        assert await store.list_sessions() == []  # nothing created for a refused request


async def test_a_deleted_sessions_run_ids_name_new_runs_in_process(tmp_path: Path) -> None:
    spec = AgentSpec(model=scripted([Reply(text="First."), Reply(text="Second.")]))
    async with helper_client(None, tmp_path, spec) as (client, store):
        sid = f"again-{uuid.uuid4().hex[:8]}"
        for expected in ("First.", "Second."):
            await client.post("/v1/sessions", json={"session_id": sid})
            async with stream(client, sid, after=0) as reader:
                started = await client.post(
                    f"/v1/sessions/{sid}/runs", json={"text": "Hi.", "run_id": "one"}
                )
                assert started.json() == {"run_id": "one"}
                await reader.until(ended("one"), within=60)
            said = [m.message.text() for m in await _messages(store, sid)]
            assert said == ["Hi.", expected]  # the session created again ran its own run
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204


def _replica(temporal: Client, tmp_path: Path, task_queue: str) -> FastAPI:
    """Another server of the deployment: its own store object, the same queue, no memory."""
    store = FileStore(tmp_path / "sessions")
    return create_app(store=store, temporal=temporal, task_queue=task_queue, agents=["helper"])


@pytest.mark.temporal
async def test_a_message_resent_through_another_server_is_delivered_once(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The answer to a message was lost (the server that took it went, say): resent through
    another server, which remembers nothing of it, the run's update ID still makes it one,
    while the run goes, after it ended, and after the session's next run started (which must
    not take it again)."""
    gate, later = GateTool(), GateTool("later")
    replies = [Reply.call("gate", id="g1"), Reply(text="Noted.")]
    replies += [Reply.call("later", id="g2"), Reply(text="Done.")]
    spec = AgentSpec(model=scripted(replies), tools=[gate.tool, later.tool])
    store = FileStore(tmp_path / "sessions")
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(tmp_path / "sessions")) as one,
        serving(one) as url,
        httpx.AsyncClient(base_url=url) as first,
    ):
        runs = one.state.server.runs
        queue = runs.executor.task_queue
        other = _replica(temporal_client, tmp_path, queue)
        async with serving(other) as url2, httpx.AsyncClient(base_url=url2) as second:
            sid = f"resent-{uuid.uuid4().hex[:8]}"
            await first.post("/v1/sessions", json={"session_id": sid})
            async with stream(first, sid, after=0) as reader:
                await first.post(f"/v1/sessions/{sid}/runs", json={"text": "Go.", "run_id": "r"})
                await asyncio.wait_for(gate.started.wait(), 60)
                steer = {"text": "Also this.", "message_id": "m-1"}
                for client in (first, second):
                    sent = await client.post(f"/v1/sessions/{sid}/messages", json=steer)
                    assert sent.status_code == 202, sent.text
                    assert sent.json() == {"run_id": "r", "message_id": "m-1"}
                gate.release.set()
                await reader.until(ended("r"), within=60)
        # resent once more after the run ended, through a server that never saw it: the ended
        # run answers its update ID with the outcome it kept (not a 409, nothing delivered)
        third, fourth = (_replica(temporal_client, tmp_path, queue) for _ in range(2))
        async with (
            serving(third) as url3,
            httpx.AsyncClient(base_url=url3) as late,
            serving(fourth) as url4,
            httpx.AsyncClient(base_url=url4) as last,
        ):
            sent = await late.post(f"/v1/sessions/{sid}/messages", json=steer)
            assert sent.status_code == 202, sent.text
            assert sent.json() == {"run_id": "r", "message_id": "m-1"}
            other_message = {"text": "Never sent before.", "message_id": "m-2"}
            refused = await late.post(f"/v1/sessions/{sid}/messages", json=other_message)
            assert refused.status_code == 409, refused.text
            async with stream(late, sid, after=0) as reader:
                await late.post(f"/v1/sessions/{sid}/runs", json={"text": "Next.", "run_id": "r2"})
                await asyncio.wait_for(later.started.wait(), 60)
                # and once more, the next run going: the run that took it answers, not this one
                sent = await last.post(f"/v1/sessions/{sid}/messages", json=steer)
                assert sent.status_code == 202, sent.text
                assert sent.json() == {"run_id": "r", "message_id": "m-1"}
                later.release.set()
                await reader.until(ended("r2"), within=60)
    said = [m.message.text() for m in await _messages(store, sid)]
    assert said == ["Go.", "", "Also this.", "Noted.", "Next.", "", "Done."]


STEER = {"text": "Also this.", "message_id": "m-1"}


def _gated_spec() -> tuple[GateTool, AgentSpec]:
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text="Noted.")]
    return gate, AgentSpec(model=scripted(replies), tools=[gate.tool])


async def _steered_then_created_again(
    client: httpx.AsyncClient, gate: GateTool, sid: str, tmp_path: Path
) -> None:
    """Run ``r`` in a new session ``sid``, send it ``m-1`` (which it takes) and let it end;
    then delete the session and create it again, as ``sessions rm`` and a new conversation
    would, in another process."""
    await client.post("/v1/sessions", json={"session_id": sid})
    async with stream(client, sid, after=0) as reader:
        await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Go.", "run_id": "r"})
        await asyncio.wait_for(gate.started.wait(), 60)
        sent = await client.post(f"/v1/sessions/{sid}/messages", json=STEER)
        assert sent.json() == {"run_id": "r", "message_id": "m-1"}
        gate.release.set()
        await reader.until(ended("r"), within=60)
    elsewhere = FileStore(tmp_path / "sessions")
    await elsewhere.delete_session(sid)
    await elsewhere.create_session(sid)


@pytest.mark.temporal
async def test_a_message_id_of_a_deleted_session_names_nothing_in_the_one_created_again(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A front-end numbering its messages per conversation sends ``m-1`` again after the
    session was deleted (``sessions rm``, another process, its workflows kept) and created
    again: no run of the new session goes, so the message is refused (409), through the
    server that handed on the old ``m-1`` and through one that never saw it. The old run, which
    took ``m-1``, answered it (202 naming that run, nothing delivered): the server remembered
    the message by session ID alone, and offered a resend to the latest runs of the ID,
    whatever session they ran in."""
    gate, spec = _gated_spec()
    store = FileStore(tmp_path / "sessions")
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(tmp_path / "sessions")) as one,
        serving(one) as url,
        httpx.AsyncClient(base_url=url) as first,
    ):
        sid = f"again-{uuid.uuid4().hex[:8]}"
        await _steered_then_created_again(first, gate, sid, tmp_path)
        other = _replica(temporal_client, tmp_path, one.state.server.runs.executor.task_queue)
        async with serving(other) as url2, httpx.AsyncClient(base_url=url2) as second:
            for client in (first, second):
                sent = await client.post(f"/v1/sessions/{sid}/messages", json=STEER)
                assert sent.status_code == 409, sent.text
    assert await _messages(store, sid) == []


async def test_a_message_id_of_a_deleted_session_names_nothing_again_in_process(
    tmp_path: Path,
) -> None:
    """As above, runs in process: the server remembered ``m-1`` by session ID alone."""
    gate, spec = _gated_spec()
    async with helper_client(None, tmp_path, spec) as (client, store):
        await _steered_then_created_again(client, gate, "again", tmp_path)
        sent = await client.post("/v1/sessions/again/messages", json=STEER)
        assert sent.status_code == 409, sent.text
        assert await _messages(store, "again") == []
