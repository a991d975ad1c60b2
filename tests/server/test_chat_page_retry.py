"""The chat page names each run it starts, so a start whose answer the network lost is sent again
and the server starts nothing more: one question, one run, one reply; a proxy's error page is
shown by its status and the question stays in the box; a message no worker took (503) and sent
again is one message (Playwright driving the system Chromium against a real server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from temporalio.client import Client

from durable_agent import MessageEntry
from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.session import Entry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually
from tests.support.worker_process import AGENT
from tests.temporal.conftest import WorkerProcesses
from tests.temporal.helpers import CRASH, queue, wait_for_file


async def test_a_start_whose_answer_was_lost_is_one_run(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Only once."), Reply(text="A second run!")]))
    app = create_app(store=store, agents={"helper": spec})
    starts: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def lose_the_first_answer(route: Any) -> None:
        starts.append(route.request.post_data_json)
        response = await route.fetch()  # the server starts the run...
        if len(starts) == 1:
            assert response.status == 202
            await route.abort("connectionreset")  # ...and its answer never arrives
        else:
            await route.fulfill(response=response)
            answered.set()

    async with serving(app) as url:
        await page.route("**/v1/sessions/*/runs", lose_the_first_answer)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")

        await asyncio.wait_for(answered.wait(), 30)  # the start sent again was answered
        await eventually(replied(page, "Only once."), within=30, interval=0.1, what="the reply")
        sid = (await store.list_sessions())[0].id
        said = [
            (e.message.role, e.message.text())
            for e in await store.load_entries(sid)
            if isinstance(e, MessageEntry)
        ]
    assert len(starts) == 2 and starts[0] == starts[1], starts  # sent again, as it was
    assert said == [("user", "hello"), ("assistant", "Only once.")]


async def test_a_proxy_error_page_is_shown_and_the_question_kept(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})

    async def bad_gateway(route: Any) -> None:  # a proxy in front answers, not the server
        await route.fulfill(status=502, content_type="text/html", body="<h1>Bad Gateway</h1>")

    async with serving(app) as url:
        await page.route("**/v1/sessions/*/runs", bad_gateway)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")

        async def told() -> str:
            return str(await page.inner_text("#status"))

        status = await eventually(told, within=10, interval=0.1, what="the status")
        assert status == "502 Bad Gateway"
        assert await page.input_value("#text") == "hello"


async def test_a_start_the_server_made_behind_an_error_page_leaves_the_box(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A proxy answers 502 for a start the server made, after the page showed the run's question
    and reply: the error is shown, and the question, asked, is not put back into the box (sent
    from there, it would have been asked twice)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Only once."), Reply(text="A second run!")]))
    app = create_app(store=store, agents={"helper": spec})

    async def made_then_bad_gateway(route: Any) -> None:
        assert (await route.fetch()).status == 202  # the server starts the run...
        await eventually(replied(page, "Only once."), within=30, interval=0.1, what="the reply")
        await route.fulfill(status=502, content_type="text/html", body="<h1>Bad Gateway</h1>")

    async with serving(app) as url:
        await page.route("**/v1/sessions/*/runs", made_then_bad_gateway)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")

        async def told() -> bool:
            return bool(await page.inner_text("#status") == "502 Bad Gateway")

        await eventually(told, within=30, interval=0.1, what="the 502 shown")
        assert await page.input_value("#text") == ""
        said = _asks(await store.load_entries(await page.evaluate("state.sid")))
    assert said == ["hello"], said


async def test_a_failed_send_of_a_text_queued_before_stays_in_the_box(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """ "ok" is sent while the run works and accepted (queued); "ok" again fails on the way (the
    network), its text back in the box. The first one's delivery was taken for the failed one's
    (matched by text): the box was emptied, and the second "ok" lost. Messages are delivered in
    the order they were accepted: the queued one is the one that arrived."""
    page, store, gate = browser_page, FileStore(tmp_path / "sessions"), GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text="Both read.")]), tools=[gate.tool]
    )
    sends: list[str] = []

    async def lose_the_second(route: Any) -> None:
        sends.append(route.request.post_data_json["text"])
        if len(sends) == 1:
            await route.continue_()
        else:
            await route.abort("connectionreset")  # every attempt of it: it fails

    async with serving(create_app(store=store, agents={"helper": spec})) as url:
        await page.route("**/v1/sessions/*/messages", lose_the_second)
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await asyncio.wait_for(gate.started.wait(), 30)
        for _ in range(2):
            await page.fill("#text", "ok")
            await page.press("#text", "Enter")
            await page.locator(".msg.queued").wait_for()  # the first accepted, shown queued

        async def failed() -> bool:
            return "network" in await page.inner_text("#status")

        await eventually(failed, within=30, interval=0.1, what="the second send failed")
        assert await page.input_value("#text") == "ok"
        gate.release.set()
        await eventually(replied(page, "Both read."), within=30, interval=0.1, what="the reply")
        assert await page.input_value("#text") == "ok"  # the one not sent, still there to send
        asks = _asks(await store.load_entries(await page.evaluate("state.sid")))
    assert asks == ["hello", "ok"], asks


@asynccontextmanager
async def _a_message_no_worker_took(
    client: Client, tmp_path: Path, page: Any, workers: WorkerProcesses
) -> AsyncIterator[tuple[FileStore, Callable[[], Awaitable[bool]]]]:
    """The run waits for a decision and its worker is SIGKILLed: a message the page sends then
    answers 503 once the server's bound is over, the server's words in the status line, its
    text back in the box; Temporal keeps it for the next worker, started here. Yields the store
    and a probe that approves what waits (503 until the fresh worker polls) until the reply."""
    root, markers, q = tmp_path / "sessions", tmp_path / "markers", queue()
    common = ["--address", client.service_client.config.target_host, "--task-queue", q]
    common += ["--markers", str(markers), "--root", str(root), "--steps", "1", "--approval"]
    first = workers.start(*common)
    await wait_for_file(markers / f"ready-{first.pid}")
    store = FileStore(root)
    app = create_app(store=store, temporal=client, task_queue=q, agents=[AGENT], update_wait=2.0)
    app.state.server.runs.executor.timeouts = CRASH
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        await page.goto(url + "/")
        await page.fill("#text", "go")
        await page.press("#text", "Enter")
        await page.locator(".approval").wait_for(timeout=60_000)  # the run waits: a message goes in
        workers.kill(first)
        await page.fill("#text", "and then?")
        await page.press("#text", "Enter")

        async def refused() -> str | None:
            said = str(await page.get_by_role("status").inner_text())
            return said if "TemporalUnavailableError" in said else None

        said = await eventually(refused, within=30, interval=0.1, what="the 503 told")
        assert "no worker has taken the message yet" in said and "sending it again" in said, said
        assert await page.input_value("#text") == "and then?"
        second = workers.start(*common)
        await wait_for_file(markers / f"ready-{second.pid}")
        base, answered = (
            f"/v1/sessions/{await page.evaluate('state.sid')}",
            replied(page, "finished:"),
        )

        async def settled() -> bool:  # each turn asks again: approve it
            for item in (await http.get(f"{base}/approvals")).json()["pending"]:
                call = quote(item["tool_call_id"], safe="")  # the script's: "call-and then?-1"
                await http.post(f"{base}/approvals/{call}", json={"approved": True})
            return await answered()

        yield store, settled


def _asks(entries: list[Entry]) -> list[str]:
    return [
        e.message.text()
        for e in entries
        if isinstance(e, MessageEntry) and e.message.role == "user"
    ]


@pytest.mark.temporal
async def test_a_message_no_worker_took_is_one_message_sent_again(
    temporal_client: Client,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
    worker_processes: WorkerProcesses,
) -> None:
    """Sent again once a fresh worker polls, the message is the same one (its ID), not a second
    one beside it when the first is delivered too."""
    page = browser_page
    async with _a_message_no_worker_took(temporal_client, tmp_path, page, worker_processes) as (
        store,
        settled,
    ):

        async def taken() -> bool:  # sent again as a person would, each time it came back
            if await page.locator(".msg.queued").count():
                return True
            if await page.input_value("#text") == "and then?":
                await page.press("#text", "Enter")
            return False

        await eventually(taken, within=90, interval=0.2, what="the message taken")
        await eventually(settled, within=90, interval=0.5, what="the reply")
        assert await page.locator(".msg.queued").count() == 0
        assert await page.input_value("#text") == ""
        asks = _asks(await store.load_entries(await page.evaluate("state.sid")))
    assert asks == ["go", "and then?"], asks  # each message once


@pytest.mark.temporal
async def test_a_message_no_worker_took_leaves_the_box_when_delivered(
    temporal_client: Client,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
    worker_processes: WorkerProcesses,
) -> None:
    """Not sent again, the message is delivered by the fresh worker after all: it shows in the
    chat and leaves the box (sent again from there, it would have been asked twice), and the
    status line no longer says it was not taken."""
    page = browser_page
    async with _a_message_no_worker_took(temporal_client, tmp_path, page, worker_processes) as (
        store,
        settled,
    ):
        await eventually(settled, within=90, interval=0.5, what="the reply")
        users = await page.locator(".msg.user").all_inner_texts()
        assert sum("and then?" in u for u in users) == 1, users
        assert await page.input_value("#text") == ""
        status = await page.inner_text("#status")
        assert "TemporalUnavailableError" not in status, status
        asks = _asks(await store.load_entries(await page.evaluate("state.sid")))
    assert asks == ["go", "and then?"], asks
