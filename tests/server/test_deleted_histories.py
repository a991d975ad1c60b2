"""Deleting a session deletes what Temporal keeps of it: every execution of its workflows (an
ended run, each run of a continue-as-new chain, a run still going), whose histories hold the
conversation's text; a run ID of the deleted session then names a new run of the session
created again under its ID."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.ai import Reply, tool
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import MessageEntry
from durable_agent.stores import FileStore
from durable_agent.workflows import SEARCH_ATTRIBUTE, AgentSpec, run_workflow_id
from tests.server.support import ended, scripted, serving, stream
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal

SECRET = "my card number is 4111"
T = TypeVar("T")


@tool
async def lookup(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


async def _executions(client: Client, sid: str) -> list[tuple[str, str]]:
    query = f'{SEARCH_ATTRIBUTE} = "{sid}"'
    return [(w.id, w.run_id) async for w in client.list_workflows(query)]


async def _gone(client: Client, workflow_id: str, run_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as exc:
        return exc.status == RPCStatusCode.NOT_FOUND
    return False


async def test_deleting_a_session_deletes_its_workflow_histories(
    temporal_client: Client, tmp_path: Path
) -> None:
    gate = GateTool()
    replies = [
        Reply.call("lookup", {"city": "Paris"}, id="c1"),
        Reply(text="Sunny."),  # the first run: two turns, so two executions (continue-as-new)
        Reply.call("gate", id="g1"),  # the second: still going when the session is deleted
        Reply(text="A new start."),  # the run of the session created again
    ]
    spec = AgentSpec(model=scripted(replies), tools=[lookup, gate.tool])
    store, queue = FileStore(tmp_path / "sessions"), f"test-{uuid.uuid4().hex[:12]}"
    app = create_app(store=store, temporal=temporal_client, task_queue=queue, agents=["helper"])
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    runs.executor.continue_as_new_after_turns = 1
    own = FileStore(tmp_path / "sessions")
    sid = f"gone-{uuid.uuid4().hex[:8]}"
    async with (
        running_worker(temporal_client, own, {"helper": spec}, task_queue=queue),
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            await client.post(f"/v1/sessions/{sid}/runs", json={"text": SECRET, "run_id": "one"})
            await reader.until(ended("one"), within=60)
        await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Next.", "run_id": "two"})
        await asyncio.wait_for(gate.started.wait(), 60)

        async def listed() -> list[tuple[str, str]] | None:
            found = await _executions(temporal_client, sid)
            return found if len(found) >= 3 else None

        executions = await eventually(listed, within=30, what="both runs listed")
        assert {w for w, _ in executions} == {run_workflow_id(sid, r) for r in ("one", "two")}
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

        async def all_gone() -> bool:
            return all([await _gone(temporal_client, w, r) for w, r in executions])

        # the ended executions, the continued one, and the run that was going: all deleted
        await eventually(all_gone, within=60, interval=0.2, what="the histories deleted")
        assert not gate.release.is_set()
        # the ID of a deleted run names a new run of the session created again
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            again = await client.post(
                f"/v1/sessions/{sid}/runs", json={"text": "Hello again.", "run_id": "one"}
            )
            assert again.status_code == 202, again.text
            await reader.until(ended("one"), within=60)
        said = [
            e.message.text() for e in await store.load_entries(sid) if isinstance(e, MessageEntry)
        ]
        assert said == ["Hello again.", "A new start."]


async def test_a_failed_history_delete_is_logged_as_one_line_naming_the_error(
    temporal_client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A namespace Temporal does not have: every call of the background delete is refused.
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    elsewhere = Client(temporal_client.service_client, namespace=missing)
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, temporal=elsewhere, task_queue="unused", agents=["helper"])
    sid = f"gone-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.WARNING, logger="durable_agent.server")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": sid})
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

        def logged() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "the workflows of deleted" in r.getMessage()]

        [record] = await eventually(_now(logged), within=30, what="the failed delete logged")

    assert record.levelno == logging.WARNING
    assert record.exc_info is None and record.exc_text is None
    assert record.getMessage() == (
        f"deleting the workflows of deleted {sid}: RPCError: Namespace {missing} is not found."
    )


async def test_a_refused_run_listing_is_logged_as_one_line_naming_the_error(
    temporal_client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Temporal refusing to list a session's runs (as a stream joins it, as it is deleted) is
    logged as one line naming the error's type and message; it named the type alone
    (``RPCError``), which says neither "not found" nor "connection refused"."""
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    elsewhere = Client(
        temporal_client.service_client,
        namespace=missing,
        data_converter=temporal_client.data_converter,
    )
    app = create_app(store=FileStore(tmp_path / "s"), temporal=elsewhere, agents=["helper"])
    sid = f"listed-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.WARNING, logger="durable_agent.server")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            await reader.until(lambda r: r.live)
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

    refused = f"RPCError: Namespace {missing} is not found."
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("listing the")]
    joined, deleted = f"listing the runs of {sid}", f"listing the runs of deleted {sid}"
    assert said == [f"{joined}: {refused}", f"{deleted}: {refused}"]


def _now(probe: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    async def asked() -> T:
        return probe()

    return asked
