"""Two runs of one session streaming at once (``on_busy: sibling``): each ``delta`` frame carries
its own run's ID and its own reply's parent, and each reply's live text rebuilt from its frames
begins its stored text, none of it after its entry, in process and on Temporal."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client

from durable_agent import ScriptedModel
from durable_agent.ai import ModelEvent, ModelRequest, Reply
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import MessageEntry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, live_until_its_entry, serving, stream
from tests.support.temporal import FAST, running_worker

TEXTS = {
    "Ready?": "Ready.",
    "A": "Apples ripen slowly in the late autumn sun of the old orchard.",
    "B": "Boats drift along the quiet river under the stone bridges.",
}

PAUSED = (TEXTS["A"], TEXTS["B"])


class TwoVoices:
    """Answers question ``A`` or ``B`` with its own text, streamed in small pieces; past the
    first half each reply waits for ``release`` (the test lets both go once a client saw both
    stream), so the two replies stream at the same time."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        text = TEXTS[request.messages[-1].text()]
        paused = False
        async for event in ScriptedModel([Reply(text=text, chunk_size=3)]).stream(request):
            yield event
            if not paused and text in PAUSED and len(event.partial.text()) >= len(text) // 2:
                paused = True
                await self.release.wait()


def _pieces(reader: Reader, run_id: str) -> list[dict[str, object]]:
    return [f.data for f in reader.frames if f.event == "delta" and f.data["run_id"] == run_id]


async def _scenario(
    client: httpx.AsyncClient, watcher: httpx.AsyncClient, store: FileStore, voices: TwoVoices
) -> None:
    """``client`` starts the runs, ``watcher`` streams them (the same server, or another)."""
    await client.post("/v1/sessions", json={"session_id": "two"})
    async with stream(watcher, "two", after=0) as reader:
        await client.post("/v1/sessions/two/runs", json={"text": "Ready?"})
        await reader.until(lambda r: r.last_seq() == 2, within=60)
        fork = reader.entries()[1][1]["id"]  # both runs grow a branch from here
        body = {"text": "A", "on_busy": "sibling", "leaf_id": fork}
        first = await client.post("/v1/sessions/two/runs", json=body)
        assert first.status_code == 202, first.text
        run_a = first.json()["run_id"]
        await reader.until(lambda r: _pieces(r, run_a), within=60)
        body = {"text": "B", "on_busy": "sibling", "leaf_id": fork}
        second = await client.post("/v1/sessions/two/runs", json=body)
        assert second.status_code == 202, second.text
        run_b = second.json()["run_id"]
        await reader.until(lambda r: _pieces(r, run_b), within=60)
        voices.release.set()  # both replies are half shown: both go on at once
        await reader.until(ended(run_a), within=60)
        await reader.until(ended(run_b), within=60)
        await reader.until(lambda r: r.last_seq() == 6)
    stored = await store.load_entries("two")
    messages = [e for e in stored if isinstance(e, MessageEntry)]
    assert len(messages) == len(stored)
    questions = {e.message.text(): e.id for e in messages if e.message.role == "user"}
    replies = {e.message.text(): e for e in messages if e.message.role == "assistant"}
    for run_id, name in ((run_a, "A"), (run_b, "B")):
        reply = replies[TEXTS[name]]
        assert reply.parent_id == questions[name]
        assert stored[[e.id for e in stored].index(questions[name])].parent_id == fork
        pieces = _pieces(reader, run_id)
        assert {p["entry_parent"] for p in pieces} == {questions[name]}, name
        live_until_its_entry(reader, reply.id, TEXTS[name], run_id)


async def test_sibling_runs_stream_apart_in_process(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    voices = TwoVoices()
    app = create_app(store=store, agents={"helper": AgentSpec(model=voices)})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _scenario(client, client, store, voices)


def _temporal_app(client: Client, store: FileStore, queue: str) -> FastAPI:
    app = create_app(store=store, temporal=client, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    return app


@pytest.mark.temporal
@pytest.mark.parametrize("servers", [1, 2], ids=["one-server", "another-server"])
async def test_sibling_runs_stream_apart_on_temporal(
    temporal_client: Client, tmp_path: Path, servers: int
) -> None:
    """With two servers, one starts the runs and the other streams them: it finds them running
    and follows their replies on the store's live channel."""
    store = FileStore(tmp_path / "sessions")
    voices = TwoVoices()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    apps = [_temporal_app(temporal_client, store, queue) for _ in range(servers)]
    async with (
        running_worker(
            temporal_client, store, {"helper": AgentSpec(model=voices)}, task_queue=queue
        ),
        contextlib.AsyncExitStack() as stack,
    ):
        clients = []
        for app in apps:
            url = await stack.enter_async_context(serving(app))
            clients.append(await stack.enter_async_context(httpx.AsyncClient(base_url=url)))
        await _scenario(clients[0], clients[-1], store, voices)
