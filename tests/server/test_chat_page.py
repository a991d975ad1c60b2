"""The chat page in a real browser (Playwright driving the system Chromium, no download) against
a real server, Temporal and worker processes: live tokens, reload mid-reply, a worker SIGKILLed
mid-reply and its replacement finishing, branches, fork; approval prompts and a message sent
while a tool runs. Screenshots are saved on failure."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent import ApprovalDecision, MessageEntry, ScriptedModel
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import serving
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker
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
        errors: list[str] = []  # the page's own: a script error, a file of its that is missing

        def failed(response: Any) -> None:
            if _own_file_failed(response):
                errors.append(f"{response.status} {response.url}")

        def logged(message: Any) -> None:  # what the browser fetched itself (the tab's icon)
            url = message.location.get("url", "")
            if message.type == "error" and "/v1/" not in url:
                errors.append(f"console: {message.text} ({url})")

        page.on("pageerror", lambda exc: errors.append(f"script: {exc}"))
        page.on("response", failed)
        page.on("console", logged)
        try:
            yield page
            assert errors == [], errors
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is None or report.failed:
                ARTIFACTS.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
                await page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
            await browser.close()


def _own_file_failed(response: Any) -> bool:
    """A file the page loads by itself (document, script, style, icon) that failed; the API's
    answers (fetch, event stream) are what each test checks."""
    kind = response.request.resource_type
    return bool(response.status >= 400 and kind not in ("fetch", "xhr", "eventsource"))


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
        # the reply grows before its receipt, steadily: the worker writes its text once a
        # second, and the page reveals each batch over the next second (3 lengths in 0.95 s)
        lengths: list[int] = []
        seen: dict[int, float] = {}
        loop = asyncio.get_running_loop()

        async def grown() -> bool:
            lengths.append(len(await _live_text(page)))
            seen.setdefault(lengths[-1], loop.time())
            return len(set(lengths) - {0}) >= 3 and lengths == sorted(lengths)

        await eventually(grown, within=30, interval=0.1, what="the live reply growing")
        first, third = sorted(t for n, t in seen.items() if n)[:3:2]
        assert third - first < 0.95, seen
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
        # on a phone the sessions go above the chat, which keeps the screen's width
        await page.set_viewport_size({"width": 390, "height": 800})
        width, scrolled = await page.evaluate(
            "() => [$('chat').clientWidth, $('chat').scrollWidth]"
        )
        assert width >= 350 and scrolled <= width, (width, scrolled)


async def _changed(page: Any, source: str) -> bool:
    return (await page.inner_text("#title")) not in (source, "No session")


KEYS = {"key-acme": {"principal": "ann", "prefix": "acme:"}}
GATES: dict[str, asyncio.Event] = {}
"""The test's: ``looking`` is set while the ``lookup`` tool runs, which returns once ``release``
is set."""


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


@tool
async def lookup(name: str) -> str:
    """Look a name up: runs until the test lets it finish."""
    GATES["looking"].set()
    await GATES["release"].wait()
    return f"{name}: found"


def _mail_script() -> list[Reply]:
    calls = [
        ToolCall(id="call-1", name="send_email", arguments={"to": "bob@example.com"}),
        ToolCall(id="call-2", name="send_email", arguments={"to": "board@example.com"}),
    ]
    return [
        Reply(tool_calls=calls),
        Reply.call("lookup", {"name": "Carol"}, id="call-3"),
        Reply(text="All done."),
    ]


async def test_the_chat_page_asks_people(
    temporal_client: Client, tmp_path: Path, browser_page: Any
) -> None:
    """Approval prompts (approve one call, deny another with a reason) and a message sent while
    a tool runs, on Temporal: what the page shows (each call's arguments once) and what the
    store holds."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    GATES.update(looking=asyncio.Event(), release=asyncio.Event())
    queue = f"test-{uuid.uuid4().hex[:12]}"
    spec = AgentSpec(model=ScriptedModel(_mail_script()), tools=[send_email, lookup])
    app = create_app(
        store=store, temporal=temporal_client, task_queue=queue, agents=["mail"], keys=KEYS
    )
    app.state.server.runs.executor.timeouts = FAST
    async with (
        running_worker(temporal_client, store, {"mail": spec}, task_queue=queue),
        serving(app) as url,
    ):
        await page.goto(url + "/")
        await page.fill("#key", "key-acme")
        await page.dispatch_event("#key", "change")
        await page.fill("#text", "Mail them, then look Carol up.")
        await page.click("#send")
        prompts = page.locator(".approval")
        await eventually(
            lambda: _count(prompts, 2), within=60, interval=0.1, what="two approval prompts"
        )
        assert "send_email" in (await prompts.first.inner_text())
        assert await _args_shown(page) == {BOB: 1, BOARD: 1}  # in its prompt, not its reply too
        await eventually(
            lambda: _says(page, "waiting for your decision"), within=10, what="the status"
        )
        await prompts.first.locator("button", has_text="approve").click()
        await eventually(
            lambda: _count(prompts, 1), within=30, interval=0.1, what="one prompt left"
        )
        await prompts.first.locator("input.reason").fill("not before the audit")
        await prompts.first.locator("button", has_text="deny").click()
        await eventually(lambda: _count(prompts, 0), within=30, interval=0.1, what="no prompt")
        decided = await page.locator(".decision").all_inner_texts()
        assert len(decided) == 2 and "approved by ann" in decided[0], decided
        assert "denied by ann: not before the audit" in decided[1], decided
        # a message while the lookup runs: queued on the page, delivered after its result
        await asyncio.wait_for(GATES["looking"].wait(), 60)
        await page.fill("#text", "Also cc Carol.")
        await page.click("#send")
        await eventually(
            lambda: _count(page.locator(".msg.queued"), 1), within=10, interval=0.1, what="queued"
        )
        GATES["release"].set()
        await eventually(
            lambda: _shows(page, "All done."), within=60, interval=0.2, what="the final reply"
        )
        assert await page.locator(".msg.queued").count() == 0
        assert await _args_shown(page) == {BOB: 1, BOARD: 1}  # in its decision
        calls = await page.locator(".msg.assistant .tools").all_inner_texts()
        assert calls == ['→ lookup({"name":"Carol"})'], calls  # no approval: in its reply
        users = await page.locator(".msg.user").all_inner_texts()
        assert any("Also cc Carol." in u for u in users), users
        sid = (await page.inner_text("#title")).strip()
    assert sid.startswith("acme:")
    stored = await store.load_entries(sid)
    decisions = [e for e in stored if isinstance(e, ApprovalDecision)]
    assert [(d.tool_call_id, d.approved, d.reason, d.decided_by) for d in decisions] == [
        ("call-1", True, None, "ann"),
        ("call-2", False, "not before the audit", "ann"),
    ]
    said = [(e.message.role, e.message.text()) for e in stored if isinstance(e, MessageEntry)]
    assert said[-6:] == [
        ("tool_result", "sent to bob@example.com"),
        ("tool_result", "tool call denied: not before the audit"),
        ("assistant", ""),
        ("tool_result", "Carol: found"),
        ("user", "Also cc Carol."),
        ("assistant", "All done."),
    ]


BOB, BOARD = '"to":"bob@example.com"', '"to":"board@example.com"'
"""The arguments of the two mails, as the page writes them."""


async def _args_shown(page: Any) -> dict[str, int]:
    """How often the chat shows each mail's arguments (a result says "sent to", unquoted)."""
    chat = await page.locator("#chat").inner_text()
    return {args: chat.count(args) for args in (BOB, BOARD)}


async def _count(locator: Any, n: int) -> bool:
    return bool(await locator.count() == n)


async def _shows(page: Any, text: str) -> bool:
    return any(text in t for t in await _assistant_texts(page))


async def _says(page: Any, status: str) -> bool:
    return bool(await page.inner_text("#status") == status)
