"""The HTTP API while no worker is up: a run waits for a decision, its worker is SIGKILLed and
none is started yet. A decision or a message then answers 503 once the server's bound is over
(nothing takes the update; Temporal holds it and may still hand it to the next worker), and the
same request sent again after a fresh worker started is one decision, one message."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import ApprovalDecision, ApprovalRequest
from durable_agent.stores import FileStore
from tests.server.support import serving
from tests.support.polling import eventually
from tests.support.worker_process import AGENT
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import CRASH, assert_one_chain, messages_of, queue, sid, wait_for_file

pytestmark = pytest.mark.temporal

WAIT = 2.0
"""The server's bound on the wait for a worker to take a decision or a message (seconds)."""


def _no_worker(answer: httpx.Response, took: float, what: str) -> dict[str, Any]:
    """The 503 of a request no worker took: within the bound, typed, saying what happened."""
    assert answer.status_code == 503, answer.text
    assert WAIT - 0.5 < took < WAIT + 5, took
    error: dict[str, Any] = answer.json()["error"]
    assert error["type"] == "TemporalUnavailableError"
    said = error["message"]
    assert f"no worker has taken the {what} yet" in said and "sending it again" in said, said
    return error


async def test_a_decision_and_a_message_no_worker_takes_answer_503_and_go_once_resent(
    temporal_client: Client, address: str, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", address, "--task-queue", q, "--markers", str(markers)]
    common += ["--root", str(root), "--steps", "1", "--approval"]
    first = worker_processes.start(*common)
    await wait_for_file(markers / f"ready-{first.pid}")
    store = FileStore(root)
    app = create_app(
        store=store, temporal=temporal_client, task_queue=q, agents=[AGENT], update_wait=WAIT
    )
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = CRASH
    session = sid("no-worker-http")
    base = f"/v1/sessions/{session}"
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        started = await http.post(f"{base}/runs", json={"text": "go", "run_id": "r1"})
        assert started.status_code == 202, started.text

        async def waiting() -> bool:
            status = (await http.get(f"{base}/runs/r1")).json()
            return bool(status.get("status") == "awaiting_approval")

        await eventually(waiting, within=60, what="the run waiting for a decision")
        pending = (await http.get(f"{base}/approvals")).json()["pending"]
        (call,) = [p["tool_call_id"] for p in pending]
        worker_processes.kill(first)

        message = {"text": "and then?", "message_id": "m-then"}
        t0 = time.monotonic()
        sent = await http.post(f"{base}/messages", json=message)
        error = _no_worker(sent, time.monotonic() - t0, "message")
        assert error["message_id"] == "m-then"
        t0 = time.monotonic()
        decided = await http.post(f"{base}/approvals/{call}", json={"approved": True})
        _no_worker(decided, time.monotonic() - t0, "decision")
        # a message sent without an ID: the 503 names the one it was given, to send it again
        unnamed = await http.post(f"{base}/messages", json={"text": "unnamed"})
        assert len(_no_worker(unnamed, WAIT, "message")["message_id"]) == 16

        second = worker_processes.start(*common)
        await wait_for_file(markers / f"ready-{second.pid}")

        async def resent(path: str, body: dict[str, Any]) -> httpx.Response:
            """The request sent again as its 503 says, until a worker took it (the workflow
            task the dead worker held reaches the new one after Temporal's sticky timeout)."""

            async def answered() -> httpx.Response | None:
                answer = await http.post(f"{base}/{path}", json=body)
                return None if answer.status_code == 503 else answer

            return await eventually(answered, within=60, what=f"an answer to {path}")

        again = await resent(f"approvals/{call}", {"approved": True})
        assert again.status_code == 200, again.text
        assert again.json()["kind"] == "approval_decision" and again.json()["approved"] is True
        took = await resent("messages", message)
        assert took.status_code == 202, took.text
        assert took.json() == {"message_id": "m-then", "run_id": "r1"}
        renamed = {"text": "unnamed", "message_id": unnamed.json()["error"]["message_id"]}
        assert (await resent("messages", renamed)).status_code == 202

        async def settled() -> bool:  # each turn the messages start asks again: approve it
            for item in (await http.get(f"{base}/approvals")).json()["pending"]:
                await http.post(f"{base}/approvals/{item['tool_call_id']}", json={"approved": True})
            return bool((await http.get(f"{base}/runs/r1")).json().get("status") == "completed")

        await eventually(settled, within=90, interval=0.5, what="the run's end")

    entries = await store.load_entries(session)
    assert_one_chain(entries)
    asked = [e.tool_call_id for e in entries if isinstance(e, ApprovalRequest)]
    decided_calls = [e.tool_call_id for e in entries if isinstance(e, ApprovalDecision)]
    assert decided_calls == asked and decided_calls[0] == call  # each call decided once
    asks = sorted(m.text() for m in messages_of(entries) if m.role == "user")
    assert asks == ["and then?", "go", "unnamed"]  # each message once
