"""The chat page in a real browser (Playwright driving the system Chromium, no download) against
a real server, Temporal and worker processes: live tokens, reload mid-reply, a worker SIGKILLed
mid-reply and its replacement finishing, branches, fork. Screenshots are saved on failure."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent.server import create_app
from durable_agent.stores import FileStore
from tests.server.support import serving
from tests.support.polling import eventually
from tests.temporal.conftest import WorkerProcesses

pytestmark = pytest.mark.temporal

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DURABLE_AGENT_ARTIFACTS") or ROOT / ".artifacts")
STREAMED = "Working on it, one careful step at a time. " * 2
"""The crash worker's first reply (tests/support/worker_process.py), streamed slowly."""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("the chat page test needs Chromium: make chromium", pytrace=False)
    return found


@pytest.fixture
async def browser_page(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = await browser.new_page()
        try:
            yield page
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is None or report.failed:
                ARTIFACTS.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
                await page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
            await browser.close()


async def _live_text(page: Any) -> str:
    live = page.locator(".msg.live")
    return str(await live.first.inner_text()) if await live.count() else ""


async def _assistant_texts(page: Any) -> list[str]:
    return [str(t) for t in await page.locator(".msg.assistant:not(.live)").all_inner_texts()]


async def test_the_chat_page(
    temporal_client: Client, tmp_path: Path, browser_page: Any, worker_processes: WorkerProcesses
) -> None:
    page, workers = browser_page, worker_processes
    root, markers = tmp_path / "sessions", tmp_path / "markers"
    markers.mkdir()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    address = temporal_client.service_client.config.target_host
    args = ["--address", address, "--task-queue", queue, "--root", str(root)]
    args += ["--markers", str(markers), "--live"]
    crashing = workers.start(*args, "--crash", "model")
    ready = markers / f"ready-{crashing.pid}"

    async def worker_ready() -> bool:
        return ready.exists()

    await eventually(worker_ready, within=60, what="the worker ready")
    app = create_app(
        store=FileStore(root), temporal=temporal_client, task_queue=queue, agents=["crashy"]
    )
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")
        # the reply grows token by token before its receipt
        lengths: list[int] = []

        async def grown() -> bool:
            lengths.append(len(await _live_text(page)))
            return len(set(lengths) - {0}) >= 3 and lengths == sorted(lengths)

        await eventually(grown, within=30, interval=0.1, what="the live reply growing")
        assert await _assistant_texts(page) == [], "no receipt yet: the text is live"
        # reload mid-reply: the text so far, once
        await page.reload()
        await eventually(lambda: _live_text(page), within=10, what="the reply after reload")
        shown = await _live_text(page)
        assert STREAMED.startswith(shown), shown
        # the worker dies mid-reply; its replacement answers while the page stays open
        assert (markers / "model-streaming").exists()
        workers.kill(crashing)
        workers.start(*args)

        async def finished() -> list[str] | None:
            texts = await _assistant_texts(page)
            return texts if any("finished: hello" in t for t in texts) else None

        texts = await eventually(finished, within=60, interval=0.2, what="the reply finished")
        assert [t for t in texts if STREAMED.strip() in t] != []
        assert sum(t.count("Working on it") for t in texts) == 2, texts  # shown once
        assert await page.locator(".msg.live").count() == 0
        # retry: a sibling branch; switch back to the first answer
        await page.locator(".msg.user button", has_text="retry").first.click()

        async def two_branches() -> bool:
            return "2/2" in (await page.locator(".nav").all_inner_texts() or [""])[0]

        await eventually(two_branches, within=60, interval=0.2, what="a second branch")
        await eventually(finished, within=60, interval=0.2, what="the retried reply")
        await page.locator(".nav button", has_text="<").first.click()
        assert "1/2" in (await page.locator(".nav").all_inner_texts())[0]
        # fork: a new session with the same path
        source = await page.inner_text("#title")
        await page.click("#fork")
        await eventually(
            lambda: _changed(page, source), within=10, interval=0.1, what="the fork opened"
        )
        await eventually(finished, within=10, interval=0.1, what="the fork's transcript")


async def _changed(page: Any, source: str) -> bool:
    return (await page.inner_text("#title")) not in (source, "No session")
