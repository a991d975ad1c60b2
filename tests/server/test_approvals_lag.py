"""A decision over HTTP while Temporal's list of running runs lags (visibility: a second or
so behind): whether the run that asked goes on is its own status, not that list."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from temporalio.client import Client, WorkflowExecution, WorkflowFailureError

from durable_agent import MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, search
from durable_agent.workflows.executor import run_workflow_id
from tests.server.support import Reader, ended, scripted, serving, stream
from tests.server.test_people import (
    ACME,
    KEYS,
    ONE_SENT_ONE_DENIED,
    SID,
    _requests,
    _script,
    _spec,
    _status,
    said_on_path,
    send_email,
)
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal


class Visibility:
    """Temporal's list of a session's running runs, held at what it said a moment ago (``held``,
    while set): it lags a second or so behind the runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: list[WorkflowExecution] | None = None
        self.asked = 0
        real = search._listed

        async def listed(client: Client, query: str, limit: int | None = None) -> list[Any]:
            found: list[WorkflowExecution] = await real(client, query, limit)
            if self.held is None or "ExecutionStatus" not in query:
                return found
            self.asked += 1
            return self.held

        monkeypatch.setattr(search, "_listed", listed)


def _app(temporal: Client, store: FileStore, queue: str) -> FastAPI:
    app = create_app(store=store, temporal=temporal, task_queue=queue, agents=["mail"], keys=KEYS)
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    return app


@asynccontextmanager
async def _two_servers(
    temporal: Client, store: FileStore, spec: AgentSpec
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two server processes sharing only the store and Temporal, and a worker of ``spec``."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with (
        running_worker(temporal, store, {"mail": spec}, task_queue=queue),
        serving(_app(temporal, store, queue)) as url_a,
        serving(_app(temporal, store, queue)) as url_b,
        httpx.AsyncClient(base_url=url_a, headers=ACME) as a,
        httpx.AsyncClient(base_url=url_b, headers=ACME) as b,
    ):
        yield a, b


async def test_the_waiting_run_takes_the_decisions_when_it_is_not_listed_yet(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server A started the run; it waits for two calls, and visibility does not list it yet.
    Server B's decisions reach it, and the one that settles its turn starts no second run
    beside it: the run carries the calls out once, alone."""
    store = FileStore(tmp_path / "sessions")
    visibility = Visibility(monkeypatch)
    async with _two_servers(temporal_client, store, _spec()) as (a, b):
        await a.post("/v1/sessions", json={"session_id": SID})
        async with stream(a, SID, after=0) as seen_a, stream(b, SID, after=0) as seen_b:
            started = await a.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail them"})
            run_id = started.json()["run_id"]
            await seen_a.until(lambda r: _status(r, run_id) == "awaiting_approval", 60)
            visibility.held = []  # as before the run started
            one = await b.post(f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True})
            assert one.status_code == 200, one.text
            two = await b.post(f"/v1/sessions/{SID}/approvals/call-2", json={"approved": False})
            assert two.status_code == 200, two.text
            await seen_a.until(ended(run_id), 60)
            assert _status(seen_a, run_id) == "completed"
            total = len(await store.load_entries(SID))
            await seen_b.until(lambda r: r.last_seq() == total)
            assert visibility.asked, "the lagging list was asked"

        def runs(reader: Reader) -> set[str]:
            return {f.data["run_id"] for f in reader.frames if f.event == "run"}

        assert runs(seen_b) <= {run_id}, "server B started a second run"
        assert len(_requests(seen_a)) == 2
    assert (await said_on_path(store, SID))[-3:] == ONE_SENT_ONE_DENIED


async def test_a_parked_run_still_listed_running_is_continued(
    temporal_client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run stopped waiting (``approval_wait``) and ended, but visibility still lists it
    running: the decision that settles its turn starts the run that carries the calls out."""
    store = FileStore(tmp_path / "sessions")
    visibility = Visibility(monkeypatch)
    spec = AgentSpec(model=scripted(_script()), tools=[send_email], approval_wait=0.05)
    async with _two_servers(temporal_client, store, spec) as (a, b):
        await a.post("/v1/sessions", json={"session_id": SID})
        async with stream(b, SID, after=0) as seen_b:
            async with stream(a, SID, after=0) as seen_a:
                started = await a.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail them"})
                first = started.json()["run_id"]
                await seen_a.until(ended(first), 60)
            wid = run_workflow_id(SID, first)
            visibility.held = [
                w async for w in temporal_client.list_workflows(f'WorkflowId = "{wid}"')
            ]
            for call, approved in (("call-1", True), ("call-2", False)):
                r = await b.post(
                    f"/v1/sessions/{SID}/approvals/{call}", json={"approved": approved}
                )
                assert r.status_code == 200, r.text

            def others(reader: Reader) -> set[str]:
                return {f.data["run_id"] for f in reader.frames if f.event == "run"} - {first}

            await seen_b.until(others, 60)
            (second,) = others(seen_b)
            await seen_b.until(ended(second), 60)
            assert visibility.asked, "the lagging list was asked"
    assert (await said_on_path(store, SID))[-3:] == ONE_SENT_ONE_DENIED


PAID: list[str] = []
"""Each time ``pay`` ran (the worker runs in this process)."""


@tool(approval=True)
async def pay(to: str) -> str:
    """Pay someone (a person approves each payment)."""
    PAID.append(to)
    return f"paid {to}"


class Lockstep:
    """Holds each server's first ``rounds`` calls of ``runs.active`` until the other server
    has made the same call: both servers then do each step of a decision's continuation at
    once, neither ahead of the other (no sleeps: each call waits on the other's)."""

    def __init__(self, servers: list[TemporalRuns], rounds: int) -> None:
        self.calls = [0] * len(servers)
        self.arrived = [[asyncio.Event() for _ in servers] for _ in range(rounds)]
        for i, runs in enumerate(servers):
            runs.active = self._held(i, runs.active)  # type: ignore[method-assign]

    def _held(self, i: int, real: Callable[..., Awaitable[list[str]]]) -> Any:
        async def active(session_id: str, **kw: Any) -> list[str]:
            k, self.calls[i] = self.calls[i], self.calls[i] + 1
            if k < len(self.arrived):
                self.arrived[k][i].set()
                async with asyncio.timeout(60):  # the other server never came: fail, not hang
                    for other in self.arrived[k]:
                        await other.wait()
            return await real(session_id, **kw)

        return active


async def test_one_decision_at_two_servers_at_once_carries_the_calls_out_once(
    temporal_client: Client, tmp_path: Path
) -> None:
    """The run parks waiting for two payments; one is approved, then two people approve the
    other at once, each through another server. Both servers read the turn as settled with
    nothing running, at the same moment: only one run carries the calls out, and each payment
    is made once."""
    PAID.clear()
    calls = [
        ToolCall(id=f"call-{i}", name="pay", arguments={"to": to})
        for i, to in ((1, "bob"), (2, "eve"))
    ]
    replies = [Reply(tool_calls=calls), Reply(text="Paid both."), Reply(text="Paid both again.")]
    spec = AgentSpec(model=scripted(replies), tools=[pay], approval_wait=0.05)
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    apps = [_app(temporal_client, store, queue) for _ in range(2)]
    servers: list[TemporalRuns] = [app.state.server.runs for app in apps]
    started: list[str] = []
    for runs in servers:
        real_start = runs.start

        async def start(*args: Any, real: Any = real_start, **kw: Any) -> str:
            run_id: str = await real(*args, **kw)
            started.append(run_id)
            return run_id

        runs.start = start  # type: ignore[method-assign]
    async with (
        running_worker(temporal_client, store, {"mail": spec}, task_queue=queue),
        serving(apps[0]) as url_a,
        serving(apps[1]) as url_b,
        httpx.AsyncClient(base_url=url_a, headers=ACME) as a,
        httpx.AsyncClient(base_url=url_b, headers=ACME) as b,
    ):
        await a.post("/v1/sessions", json={"session_id": SID})
        first = (await a.post(f"/v1/sessions/{SID}/runs", json={"text": "Pay them"})).json()
        parked = temporal_client.get_workflow_handle(run_workflow_id(SID, first["run_id"]))
        assert (await parked.result())["status"] == "awaiting_approval"
        one = await a.post(f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True})
        assert one.status_code == 200, one.text
        started.clear()  # the first run's
        Lockstep(servers, rounds=2)  # the busy check, then the run start's own
        path = f"/v1/sessions/{SID}/approvals/call-2"
        both = await asyncio.gather(*(c.post(path, json={"approved": True}) for c in (a, b)))
        assert [r.status_code for r in both] == [200, 200], [r.text for r in both]
        assert both[0].json()["id"] == both[1].json()["id"], "one decision stored"
        for run_id in set(started):
            handle = temporal_client.get_workflow_handle(run_workflow_id(SID, run_id))
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
    assert sorted(PAID) == ["bob", "eve"], f"payments made: {PAID}"
    assert len(set(started)) == 1, f"continuation runs started: {started}"
    results = [
        e.message.text()
        for e in await store.load_entries(SID)
        if isinstance(e, MessageEntry) and e.message.role == "tool_result"
    ]
    assert results == ["paid bob", "paid eve"], results
