"""An operator decides a waiting call from the Temporal Web UI, in a real browser (Playwright on
the system Chromium, no download) against a dev server started as ``durable-agent dev`` starts it
(``--ui-port``): the run's page, **More Actions → Send an Update**, name ``decide``, update ID
``decide:<call>``, plain JSON, **Submit**. The store then holds the decision (its ID derived from
the request's) and the approved tool's result, and the run completes
(docs/design.md#approvals-and-steering). Screenshots go to the test's tmp dir (and the
artifacts directory on failure); the README's operator lines describe the same clicks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_agent import ApprovalDecision, ApprovalRequest, MessageEntry, new
from durable_agent.ai import Reply, ScriptedModel, ToolCall, tool
from durable_agent.cli.dev import DevServer, start_dev_server
from durable_agent.session import decision_entry_id
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, run_workflow_id
from tests.durable_runs.test_approvals import Reader
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

pytestmark = pytest.mark.temporal

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DURABLE_AGENT_ARTIFACTS") or ROOT / ".artifacts")
SENT: list[str] = []


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    SENT.append(to)
    return f"sent to {to}"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("the Temporal UI test needs Chromium: make chromium", pytrace=False)
    return found


@pytest.fixture
async def dev_server(tmp_path: Path) -> AsyncIterator[DevServer]:
    """A dev server with its Web UI, on free ports (as ``durable-agent dev`` starts it)."""
    root = tmp_path / "temporal"
    (root / "logs").mkdir(parents=True)
    server = await start_dev_server(root, port=None, ui_port=None)
    try:
        yield server
    finally:
        assert server.process is not None
        server.process.stop()


@pytest.fixture
async def browser_page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            yield await browser.new_page(viewport={"width": 1400, "height": 900})
        finally:
            await browser.close()


@contextlib.asynccontextmanager
async def shot_on_failure(page: Any, tmp_path: Path, name: str) -> AsyncIterator[None]:
    """A failure leaves the page's last view in the tmp dir and the artifacts directory."""
    try:
        yield
    except BaseException:
        await page.screenshot(path=str(tmp_path / "failure.png"))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240
        await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
        raise


async def test_decide_from_the_temporal_ui(
    dev_server: DevServer, browser_page: Any, tmp_path: Path
) -> None:
    page, store, queue = browser_page, MemoryStore(), f"test-{uuid.uuid4().hex[:12]}"
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    call = ToolCall(id="c1", name="send_email", arguments={"to": "bob@example.com"})
    spec = AgentSpec(model=ScriptedModel([Reply(tool_calls=[call]), "sent it"]), tools=[send_email])
    SENT.clear()
    async with running_worker(client, store, {"a": spec}, task_queue=queue):
        executor = TemporalExecutor(client, task_queue=queue, timeouts=FAST)
        agent = await new("a", store=store, session_id="ui-decide", executor=executor)
        stream = await agent.run("mail bob", run_id="r1")
        reader = Reader(stream)
        await reader.until("approval_requested")
        workflow_id = run_workflow_id(agent.session_id, stream.run_id)
        run = (await client.get_workflow_handle(workflow_id).describe()).run_id
        quoted = urllib.parse.quote(workflow_id, safe="")
        async with shot_on_failure(page, tmp_path, "temporal-ui-decide"):
            await page.goto(
                f"{dev_server.ui_url}/namespaces/default/workflows/{quoted}/{run}/history"
            )

            # More Actions → Send an Update
            await page.get_by_role("button", name="More Actions").click()
            await page.get_by_role("menuitem", name="Send an Update").click()
            dialog = page.get_by_role("dialog")
            # Name: decide (the UI lists the workflow's updates: decide, send, Custom)
            await dialog.get_by_test_id("update-select-button").click()
            await page.get_by_role("option", name="decide", exact=True).click()
            await dialog.get_by_test_id("update-id").fill("decide:c1")
            body = {"tool_call_id": "c1", "approved": True, "decided_by": "ops"}
            await dialog.locator(".cm-content").click()
            await page.keyboard.insert_text(json.dumps(body))
            await page.screenshot(path=str(tmp_path / "send-an-update.png"))
            # focus Submit first: leaving the JSON editor reformats it and moves the button
            submit = dialog.get_by_role("button", name="Submit")
            await submit.focus()
            await submit.press("Enter")
            await page.get_by_text("Update successful").first.wait_for()
            await page.screenshot(path=str(tmp_path / "update-successful.png"))

        async def ended() -> bool:
            return not agent.running

        await eventually(ended, within=30, what="the run's end")
        await reader.done()
        history = await client.get_workflow_handle(workflow_id).fetch_history()

    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.meta.update_id
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert accepted == ["decide:c1"]  # the update ID typed in the UI

    entries = await store.load_entries(agent.session_id)
    request = next(e for e in entries if isinstance(e, ApprovalRequest))
    decision = next(e for e in entries if isinstance(e, ApprovalDecision))
    assert decision.id == decision_entry_id(request.id)
    assert (decision.tool_call_id, decision.approved, decision.decided_by) == ("c1", True, "ops")
    results = [
        e.message
        for e in entries
        if isinstance(e, MessageEntry) and e.message.role == "tool_result"
    ]
    assert [(r.tool_call_id, r.text(), r.is_error) for r in results] == [
        ("c1", "sent to bob@example.com", False)
    ]
    assert SENT == ["bob@example.com"]
    assert entries[-1].parent_id == entries[-2].id
    last = entries[-1]
    assert isinstance(last, MessageEntry) and last.message.text() == "sent it"
    assert (tmp_path / "update-successful.png").stat().st_size > 10_000
