"""``POST /v1/sessions/{id}/compact``: the session's compaction in process and on Temporal, the
stored entry in the answer and on the stream, and every refusal storing nothing."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent import CompactionEntry
from durable_agent.ai import ModelRequest, Reply, ScriptedModel
from durable_agent.durable import DEFAULT_COMPACT_PROMPT
from durable_agent.server import create_app
from durable_agent.server.runs import STORE_UNAVAILABLE
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session.codec import entry_to_wire
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from durable_agent.workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE
from tests.server.support import ended, helper_app, scripted, serving, stream
from tests.server.test_run_failure import WritesDown
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

SUMMARY = "They asked twice; both were answered."


class Answers:
    """Answers each question; the summarizer's request (the compaction prompt) gets
    :data:`SUMMARY` after ``summary_delay`` and sets ``summarizing`` first."""

    def __init__(self, summary_delay: float = 0.0, answer_delay: float = 0.0) -> None:
        self.summary_delay, self.answer_delay = summary_delay, answer_delay
        self.summarizing = asyncio.Event()
        self.summarized: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Reply:
        if request.messages[-1].text() == DEFAULT_COMPACT_PROMPT:
            self.summarized.append(request)
            self.summarizing.set()
            return Reply(text=SUMMARY, delay=self.summary_delay)
        asked = request.messages[-1].text()
        return Reply(text=f"About {asked}", chunk_size=4, chunk_delay=self.answer_delay)


async def _turn(client: httpx.AsyncClient, sid: str, question: str) -> None:
    """One run to its end, followed on the stream."""
    await client.post("/v1/sessions", json={"session_id": sid})
    async with stream(client, sid) as reader:
        started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": question})
        assert started.status_code == 202, started.text
        await reader.until(ended(started.json()["run_id"]), within=60)


async def _compacts(client: httpx.AsyncClient, sid: str, answers: Answers) -> None:
    """Two turns, then ``keep_turns=1``: the entry answered, stored and streamed; then nothing
    left to compact."""
    await _turn(client, sid, "q1")
    await _turn(client, sid, "q2")
    before = (await client.get(f"/v1/sessions/{sid}")).json()
    assert before["last_seq"] == 4
    async with stream(client, sid, after=4) as reader:
        done = await client.post(f"/v1/sessions/{sid}/compact", json={"keep_turns": 1})
        assert done.status_code == 200, done.text
        entry = done.json()["entry"]
        await reader.until(lambda r: r.last_seq() == 5, within=30)
    assert reader.entries() == [(5, entry)]
    assert entry["type"] == "compaction" and entry["summary"] == SUMMARY
    assert entry["parent_id"] == before["leaf_id"]
    entries = (await client.get(f"/v1/sessions/{sid}/entries")).json()["entries"]
    assert entry["first_kept_id"] == entries[2]["entry"]["id"]  # the second question
    assert entries[-1] == {"seq": 5, "entry": entry}
    # the summarizer saw the first turn only, then the prompt
    assert [m.text() for m in answers.summarized[-1].messages] == [
        "q1",
        "About q1",
        DEFAULT_COMPACT_PROMPT,
    ]
    # fewer turns than kept: nothing called, nothing stored
    calls = len(answers.summarized)
    nothing = await client.post(f"/v1/sessions/{sid}/compact", json={"keep_turns": 5})
    assert nothing.status_code == 200 and nothing.json() == {"entry": None}
    assert len(answers.summarized) == calls
    assert (await client.get(f"/v1/sessions/{sid}")).json()["last_seq"] == 5


async def test_compact_in_process_answers_stores_and_streams_the_entry(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    answers = Answers()
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(answers))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _compacts(client, "c1", answers)
        stored = await store.load_entries("c1")
        assert isinstance(stored[-1], CompactionEntry)
        # the compaction of a branch: the path to the first answer
        first = stored[1].id
        done = await client.post("/v1/sessions/c1/compact", json={"leaf_id": first})
        assert done.status_code == 200, done.text
        assert done.json()["entry"]["parent_id"] == first
        assert done.json()["entry"]["first_kept_id"] == ""


async def test_compact_is_refused_while_a_run_goes_and_a_run_while_it_compacts(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "sessions")
    answers = Answers(summary_delay=1.0, answer_delay=0.05)
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(answers))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "c2"})
        async with stream(client, "c2") as reader:
            run = await client.post("/v1/sessions/c2/runs", json={"text": "a long question"})
            run_id = run.json()["run_id"]
            busy = await client.post("/v1/sessions/c2/compact", json={})
            assert busy.status_code == 409, busy.text
            assert busy.json()["error"] == {
                "type": "RunActiveError",
                "message": busy.json()["error"]["message"],
                "run_id": run_id,
            }
            await reader.until(ended(run_id), within=30)
        assert len(await store.load_entries("c2")) == 2
        compacting = asyncio.create_task(client.post("/v1/sessions/c2/compact", json={}))
        await asyncio.wait_for(answers.summarizing.wait(), 10)
        refused = await client.post("/v1/sessions/c2/runs", json={"text": "meanwhile"})
        assert refused.status_code == 409 and refused.json()["error"]["type"] == "RunActiveError"
        done = await compacting
        assert done.status_code == 200 and done.json()["entry"]["summary"] == SUMMARY
        assert len(await store.load_entries("c2")) == 3  # the refused run stored nothing


@pytest.mark.parametrize(
    "body",
    [{"keep_turns": -1}, {"keep_turns": "2"}, {"keep_turns": 1.5}, {"keep_turns": True}, {"x": 1}],
)
async def test_a_bad_body_is_refused_and_stores_nothing(
    tmp_path: Path, body: dict[str, Any]
) -> None:
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(Answers()))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _turn(client, "c3", "q1")
        r = await client.post("/v1/sessions/c3/compact", json=body)
        assert r.status_code == 422 and r.json()["error"]["type"] == "ValidationError", r.text
        r = await client.post(
            "/v1/sessions/c3/compact",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "MalformedJSONError"
        r = await client.post("/v1/sessions/c3/compact", json={"agent": "nobody"})
        assert r.status_code == 422 and r.json()["error"]["type"] == "UnknownAgentError"
        r = await client.post("/v1/sessions/c3/compact", json={"leaf_id": "nowhere"})
        assert r.status_code == 404 and r.json()["error"]["type"] == "EntryNotFoundError"
        assert len(await store.load_entries("c3")) == 2


async def test_a_failed_summary_is_a_typed_error_and_stores_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    replies = [Reply(text="About q1"), Reply(text="")]  # an empty summary
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _turn(client, "c4", "q1")
        r = await client.post("/v1/sessions/c4/compact", json={})
        assert r.status_code == 502 and r.json()["error"]["type"] == "CompactError", r.text
        assert len(await store.load_entries("c4")) == 2


async def test_a_failed_summary_names_none_of_the_servers_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's error can quote the key it was refused (a client library's, a gateway's):
    the 502 carried it whole to any caller, while a failed run's status masks it."""
    key = "sk-proj-Rq7vLm2XcT9bWz4YpK8sNd3F"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    def refused(request: ModelRequest) -> Reply:
        if request.messages[-1].text() == DEFAULT_COMPACT_PROMPT:
            raise RuntimeError(f"401 from the gateway: Incorrect API key provided: {key}")
        return Reply(text="About it")

    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(refused))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _turn(client, "c5", "q1")
        r = await client.post("/v1/sessions/c5/compact", json={})
        assert r.status_code == 502 and r.json()["error"]["type"] == "CompactError", r.text
        message = r.json()["error"]["message"]
        assert "Incorrect API key provided" in message and "[redacted]" in message, message
        assert key not in r.text and key[8:20] not in r.text, r.text


async def test_without_a_runner_compact_answers_503(tmp_path: Path) -> None:
    app = create_app(store=FileStore(tmp_path / "s"))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/v1/sessions", json={"session_id": "a"})).status_code == 201
        r = await client.post("/v1/sessions/a/compact", json={"keep_turns": 0})
        assert r.status_code == 503 and r.json()["error"]["type"] == "RunsUnavailableError"
        r = await client.post("/v1/sessions/missing/compact", json={})
        assert r.status_code == 404 and r.json()["error"]["type"] == "SessionNotFoundError"


async def test_openapi_shows_the_compact_body(tmp_path: Path) -> None:
    app = create_app(store=FileStore(tmp_path / "s"))
    schema = app.openapi()
    route = schema["paths"]["/v1/sessions/{session_id}/compact"]["post"]
    ref = route["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert body["properties"]["keep_turns"]["minimum"] == 0
    assert set(body["properties"]) == {"keep_turns", "leaf_id", "agent"}


@pytest.mark.temporal
async def test_compact_on_temporal_runs_the_compaction_workflow(
    temporal_client: Client, tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    answers = Answers()
    sid = f"t{uuid.uuid4().hex[:8]}"
    spec = AgentSpec(model=ScriptedModel(answers))
    app = create_app(store=store, temporal=temporal_client, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    async with (
        running_worker(temporal_client, store, {"helper": spec}, task_queue=queue),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await _compacts(client, sid, answers)
        query = f'{SEARCH_ATTRIBUTE} = "{sid}" AND {KIND_ATTRIBUTE} = "compact"'

        async def compactions() -> list[str] | None:
            ids = [w.id async for w in temporal_client.list_workflows(query)]
            return ids if len(ids) >= 2 else None  # the compaction, and the one with nothing to do

        ids = await eventually(compactions, within=20, interval=0.2, what="the compaction")
        assert len(ids) == 2
        assert all(i.startswith(f"durable-agent/{sid}/compact/") for i in ids)
        stored = await store.load_entries(sid)
        assert entry_to_wire(stored[-1])["summary"] == SUMMARY


async def test_a_compaction_its_store_failed_answers_503_as_in_process(
    temporal: Client | None, tmp_path: Path
) -> None:
    """The compaction's write fails (on a worker, until its retries ran out): 503
    ``StoreUnavailableError``, as in process, naming no path (on Temporal it answered 502
    ``CompactError``, as if the summarizer had failed)."""
    root = tmp_path / "private-root"
    writes = WritesDown(root)
    server_store = writes if temporal is None else FileStore(root)
    spec = AgentSpec(model=ScriptedModel(Answers()))
    async with (
        helper_app(temporal, server_store, spec, lambda: writes) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = f"down-{uuid.uuid4().hex[:8]}"
        await _turn(client, sid, "q1")
        writes.allowed = 0
        answer = await client.post(f"/v1/sessions/{sid}/compact", json={"keep_turns": 0})
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"] == {"type": "StoreUnavailableError", "message": STORE_UNAVAILABLE}
