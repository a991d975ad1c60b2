"""A failed run says why: its end on the stream and its status (``GET .../runs/{id}``) carry the
error a caller of the library would have caught, its class name and message, in process and on
Temporal (also on a server that did not start the run), without the keys the server process
holds; the chat page shows it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent.ai import ModelError, ModelEvent, ModelRequest, Reply
from durable_agent.durable.errors import AgentError
from durable_agent.server import create_app
from durable_agent.server.runs import FAILURE_CHARS, STORE_UNAVAILABLE, RunFailure
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session import Entry, MessageEntry, StoreUnavailableError
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import (
    ended,
    helper_app,
    helper_client,
    replied,
    scripted,
    serving,
    stream,
)
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

SECRET = "sk-proj-test-0123456789abcdef"


async def test_a_failed_run_says_why(
    temporal: Client | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # on Temporal: the worker's key, in this process
    refused = ModelError(f"upstream rejected the request (HTTP 400) for {SECRET}", retryable=False)
    spec = AgentSpec(model=scripted([Reply(error=refused), Reply(text="ok")]))
    async with helper_client(temporal, tmp_path, spec) as (client, _):
        sid = f"fails-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
            run_id = started.json()["run_id"]
            await reader.until(ended(run_id), within=60)
            end = [f.data for f in reader.frames if f.event == "run"][-1]
            assert end["status"] == "failed" and end["error"]["type"] == "ModelError"
            assert SECRET not in str(end) and "(HTTP 400)" in end["error"]["message"]
            status = (await client.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
            assert status["error"] == end["error"]
            assert status["status"] == "failed"
            assert status["error"]["type"] == "ModelError"
            assert "upstream rejected the request (HTTP 400)" in status["error"]["message"]
            assert SECRET not in status["error"]["message"]
            assert SECRET[:12] not in str(status)

            # a second run, which completes, says nothing of an error
            second = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Again"})
            second_id = second.json()["run_id"]
            await reader.until(ended(second_id), within=60)
        assert [f.data for f in reader.frames if f.event == "run"][-1] == {
            "run_id": second_id,
            "status": "completed",
        }
        done = (await client.get(f"/v1/sessions/{sid}/runs/{second_id}")).json()
        assert done == {"run_id": second_id, "status": "completed"}


async def test_the_chat_page_shows_why_a_run_failed(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    refused = ModelError("upstream rejected the request (HTTP 400)", retryable=False)
    spec = AgentSpec(model=scripted([Reply(error=refused), Reply(text="Fine now.")]))
    app = create_app(store=store, agents={"helper": spec})

    async def status() -> str:
        text: str = await page.locator("#status").inner_text()
        return text

    async def says_why() -> bool:
        return "HTTP 400" in await status()

    fulfilled = asyncio.Event()

    async def answered_after_the_end(route: Any) -> None:
        # the stream tells the run's failure before the start's answer arrives, which must not
        # make the page think the run goes
        response = await route.fetch()
        await eventually(says_why, within=30, interval=0.1, what="the failure on the page")
        await route.fulfill(response=response)
        fulfilled.set()

    async with serving(app) as url:
        await page.goto(url + "/")
        await page.click("#new")

        async def live() -> bool:
            return bool(await page.evaluate("state.heard"))

        await eventually(live, within=30, interval=0.05, what="the stream live")
        await page.route("**/v1/sessions/*/runs", answered_after_the_end)
        await page.fill("#text", "hello")
        await page.click("#send")
        await asyncio.wait_for(fulfilled.wait(), 30)
        await page.unroute("**/v1/sessions/*/runs")
        assert (await status()).startswith("the run failed: ModelError: upstream rejected")

        # the next run clears it
        await page.fill("#text", "again")
        await page.click("#send")

        await eventually(
            replied(page, "Fine now."), within=30, interval=0.1, what="the second reply"
        )
        assert "failed" not in await status()


async def test_a_run_that_ended_before_the_page_listened_is_seen_ended(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The stream tells the runs going when it joins, not those that ended before: the page
    asks for the status of a run it started before its stream was live (a fast run of a new
    session, a stream that dropped), else it would show it working for ever."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    refused = ModelError("upstream rejected the request (HTTP 400)", retryable=False)
    spec = AgentSpec(model=scripted([Reply(text="Quick."), Reply(error=refused)]))
    app = create_app(store=store, agents={"helper": spec})
    runs = app.state.server.runs
    held: list[str] = []

    async def after_the_run_ended(route: Any) -> None:
        held.append(route.request.url)
        if len(held) == 1:
            sid = route.request.url.split("/v1/sessions/")[1].split("/")[0]

            async def ended() -> bool:
                said = [e for e in await store.load_entries(sid) if isinstance(e, MessageEntry)]
                return len(said) == 2 and not await runs.active(sid)

            await eventually(ended, within=30, interval=0.05, what="the run's end")
        await route.continue_()

    async with serving(app) as url:
        await page.route("**/v1/sessions/*/stream", after_the_run_ended)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")

        async def settled() -> bool:
            return await replied(page, "Quick.")() and await page.is_disabled("#stop")

        await eventually(settled, within=30, interval=0.1, what="the run seen ended")
        assert await page.locator("#status").inner_text() == ""

        # with the stream live, the next run's failure comes on it
        await page.fill("#text", "again")
        await page.click("#send")

        async def says_why() -> bool:
            return "HTTP 400" in await page.locator("#status").inner_text()

        await eventually(says_why, within=30, interval=0.1, what="the failure on the page")
    assert len(held) == 1, held


class HeldThenRefused:
    """A model whose call waits for ``go``, then fails for good."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.go = asyncio.Event()
        refused = ModelError("upstream rejected the request (HTTP 400)", retryable=False)
        self.inner = scripted([Reply(error=refused)])

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.called.set()
        await self.go.wait()
        async for event in self.inner.stream(request):
            yield event


@pytest.mark.temporal
async def test_another_server_tells_why_a_run_failed(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A server that did not start the run finds it running and tells its end from Temporal's
    account of it, the failure included."""
    model = HeldThenRefused()
    store = FileStore(tmp_path / "sessions")
    async with helper_app(
        temporal_client, store, AgentSpec(model=model), lambda: FileStore(tmp_path / "sessions")
    ) as app:
        runs = app.state.server.runs
        assert isinstance(runs, TemporalRuns)
        other = create_app(
            store=FileStore(tmp_path / "sessions"),
            temporal=temporal_client,
            task_queue=runs.executor.task_queue,
            agents=["helper"],
        )
        async with (
            serving(app) as url,
            serving(other) as other_url,
            httpx.AsyncClient(base_url=url) as client,
            httpx.AsyncClient(base_url=other_url) as watching,
        ):
            sid = f"watched-{uuid.uuid4().hex[:8]}"
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
            run_id = started.json()["run_id"]
            await asyncio.wait_for(model.called.wait(), 60)
            async with stream(watching, sid, after=0) as reader:
                await reader.until(lambda r: any(f.event == "run" for f in r.frames), within=60)
                model.go.set()
                await reader.until(ended(run_id), within=60)
            end = [f.data for f in reader.frames if f.event == "run"][-1]
            assert end["status"] == "failed", end
            assert end["error"]["type"] == "ModelError", end
            assert "(HTTP 400)" in end["error"]["message"]


def test_a_failures_message_is_cut_and_keeps_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    failure = RunFailure.of(ModelError(f"{SECRET} said: " + "x" * 10_000, retryable=False))
    assert failure.type == "ModelError" and len(failure.message) == FAILURE_CHARS
    assert failure.message.endswith("…") and SECRET[:12] not in failure.message


LOST = "lost-with-the-process"


async def test_a_run_the_server_does_not_know_is_not_shown_working(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A run an in-process server lost (it restarted) answers 404: the page stops showing it
    working (here the start's answer names a run the server never had)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})

    asked: list[str] = []

    async def a_lost_run(route: Any) -> None:
        await route.fulfill(status=202, json={"run_id": LOST})

    async def its_status(route: Any) -> None:
        asked.append(route.request.url)  # asked once the page holds the run as going
        await route.continue_()

    async with serving(app) as url:
        await page.route("**/v1/sessions/*/runs", a_lost_run)
        await page.route(f"**/v1/sessions/*/runs/{LOST}", its_status)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")

        async def dropped() -> bool:
            runs = await page.evaluate("[...state.runs.entries()]")
            # kept as lost: the page saw that run end unfinished (and says so of its question)
            return bool(asked) and runs == [[LOST, "lost"]] and await page.is_disabled("#stop")

        await eventually(dropped, within=30, interval=0.05, what="the lost run dropped")


async def test_a_run_failed_by_its_store_names_nothing_of_the_server(tmp_path: Path) -> None:
    """A run the store failed under says so, as a 503 does, without the store's path (a
    StoreUnavailableError names the FileStore's root or MongoDB's host:port), whether it
    failed in process or on a worker (whose failure reaches the server as ``AgentError``)."""
    root = tmp_path / "private-root"
    store = FileStore(root)
    root.write_text("not a directory")  # a disk gone
    with pytest.raises(StoreUnavailableError) as down:
        await store.create_session("s1")
    assert "private-root" in str(down.value)
    on_a_worker = AgentError(f"StoreUnavailableError: {down.value}")
    for failure in (RunFailure.of(down.value), RunFailure.of(on_a_worker)):
        assert failure.type == "StoreUnavailableError"
        assert "private-root" not in failure.message and "unavailable" in failure.message


class WritesDown(FileStore):
    """A worker's FileStore whose appends fail, once ``allowed`` more went through, as a store
    whose disk went does: ``StoreUnavailableError`` naming its root, on every attempt."""

    allowed: int | None = None

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        self._count()
        await super().append_entries(session_id, entries)

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        """What a run started through the server stores its input with: an append too."""
        self._count()
        return await super().append_if_last(session_id, entries, last_id)

    def _count(self) -> None:
        if self.allowed is not None and self.allowed <= 0:
            raise StoreUnavailableError(f"file store {self.root}: [Errno 5] Input/output error")
        if self.allowed is not None:
            self.allowed -= 1


@pytest.mark.parametrize("allowed", [0, 1], ids=["input", "reply"])
async def test_a_run_its_store_failed_on_a_worker_names_nothing_of_the_server(
    temporal_client: Client, tmp_path: Path, allowed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's write of a run (its input, the workflow's; or its reply, the model call's)
    fails until its retries run out: the run's end on the stream, its status and its AG-UI
    ``RUN_ERROR`` say the store is unavailable, as a 503 does, without the worker's store path
    (they said ``PersistError: persist input: file store <root>: ...``)."""
    root = tmp_path / "private-root"
    worker_store = WritesDown(root)
    spec = AgentSpec(model=scripted([Reply(text="never stored")] * 20))  # one a model attempt
    async with (
        helper_app(temporal_client, FileStore(root), spec, lambda: worker_store) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        sid = f"down-{uuid.uuid4().hex[:8]}"
        await client.post("/v1/sessions", json={"session_id": sid})
        async with stream(client, sid, after=0) as reader:
            worker_store.allowed = allowed
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "Hi"})
            run_id = started.json()["run_id"]
            await reader.until(ended(run_id), within=60)
        [end] = [
            f.data for f in reader.frames if f.event == "run" and f.data["status"] != "started"
        ]
        status = (await client.get(f"/v1/sessions/{sid}/runs/{run_id}")).json()
        worker_store.allowed = allowed
        body = {"threadId": f"{sid}-agui", "runId": "agui-1", "messages": [AGUI_HI]}
        async with client.stream("POST", "/v1/agui", json=body) as response:
            lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
        agui_end = json.loads(lines[-1][6:])
    told = {"type": "StoreUnavailableError", "message": STORE_UNAVAILABLE}
    assert (end["status"], end.get("error")) == ("failed", told), end
    assert (status["status"], status.get("error")) == ("failed", told), status
    assert agui_end["type"] == "RUN_ERROR", lines
    assert agui_end["code"] == told["type"] and STORE_UNAVAILABLE in agui_end["message"], agui_end
    assert "private-root" not in str([end, status, lines])
    assert "private-root" in caplog.text  # the worker's log says which store failed


AGUI_HI = {"id": "m1", "role": "user", "content": "Hi"}
