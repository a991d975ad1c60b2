"""What the chat page shows and offers when a run goes wrong: a message sent into a run that then
fails, a run cancelled from elsewhere, a page reloaded after its run ended badly (Playwright
driving the system Chromium against a real server, in process and on Temporal)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent import MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.ai.messages import assistant_message, user_message
from durable_agent.server import create_app, temporal_ends
from durable_agent.session import Entry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, helper_app, quiet, replied, scripted, serving, stream
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.server.test_run_failure import HeldThenRefused
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually


def _said(entries: list[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


def _status(page: Any, says: str) -> Any:
    async def probe() -> bool:
        return says in await page.get_by_role("status").inner_text()

    return probe


async def test_a_message_the_failed_run_never_took_comes_back_to_the_box(
    temporal: Client | None,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A message sent while the run works is accepted (shown queued) and held for the run's
    next turn; the run then fails before that turn, storing nothing of it. The page kept
    showing it queued, under the failure, as if it would still be sent, and a reload lost it.
    It comes back into the box, the page says it was not sent, and sending it asks it."""
    page, model = browser_page, HeldThenRefused()
    spec = AgentSpec(model=model)
    store = FileStore(tmp_path / "sessions")
    worker_store = lambda: FileStore(tmp_path / "sessions")  # noqa: E731
    async with helper_app(temporal, store, spec, worker_store) as app, serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await asyncio.wait_for(model.called.wait(), 60)  # the run works: what is typed goes in
        await page.fill("#text", "and also this")
        await page.press("#text", "Enter")
        await page.locator(".msg.queued").wait_for()  # accepted by the run
        model.go.set()
        await eventually(_status(page, "HTTP 400"), within=60, interval=0.1, what="the failure")
        await eventually(_status(page, "not sent"), within=10, interval=0.1, what="told")
        assert await page.locator(".msg.queued").count() == 0
        assert await page.input_value("#text") == "and also this"
        sid = await page.evaluate("state.sid")
        said = _said(await store.load_entries(sid))
        assert said == ["hello"], said

        model.inner = scripted([Reply(text="Both now.")])
        await page.press("#text", "Enter")
        await eventually(replied(page, "Both now."), within=60, interval=0.1, what="the reply")
        said = _said(await store.load_entries(sid))
    assert said == ["hello", "and also this", "Both now."], said


def _failed(reader: Reader) -> bool:
    return any(f.event == "run" and f.data["status"] == "failed" for f in reader.frames)


@pytest.mark.temporal
async def test_a_page_that_hears_late_that_its_run_failed_says_why(
    temporal_client: Client,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page's stream comes only once the run has failed (its start slow on a loaded server,
    a connection that dropped as the run failed), so the page asks the server how the run
    ended. The server read why from Temporal's history again, and a loaded Temporal may not
    answer in time (here it has no time at all): the page said "the run failed" and no more,
    for good, though this server had learnt why as the run failed (its stream of the run ended
    with it, and a client watching was told)."""
    monkeypatch.setattr(temporal_ends, "FAILURE_TIMEOUT", timedelta(microseconds=1))
    page, model, connect = browser_page, HeldThenRefused(), asyncio.Event()

    async def late(route: Any) -> None:
        await connect.wait()
        await route.continue_()

    await page.route("**/v1/sessions/*/stream", late)
    store = FileStore(tmp_path / "sessions")
    worker_store = lambda: FileStore(tmp_path / "sessions")  # noqa: E731
    async with (
        helper_app(temporal_client, store, AgentSpec(model=model), worker_store) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await asyncio.wait_for(model.called.wait(), 60)
        sid = await page.evaluate("state.sid")
        async with stream(client, sid, after=0) as watching:  # another browser
            await watching.until(lambda r: r.live, within=60)
            await page.fill("#text", "and also this")
            await page.press("#text", "Enter")
            await page.locator(".msg.queued").wait_for()
            model.go.set()
            await watching.until(_failed, within=60)
        connect.set()
        await eventually(_status(page, "not sent"), within=60, interval=0.1, what="told")
        said = await page.get_by_role("status").inner_text()
        assert "ModelError: upstream rejected the request (HTTP 400)" in said, said


async def test_a_run_cancelled_elsewhere_is_said_cancelled(
    temporal: Client | None,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A run cancelled from elsewhere (the CLI, another client's cancel request) was told as
    "the last run did not finish", as a run a server lost is: the page says it was cancelled,
    and continue goes on from where it stopped."""
    page, gate = browser_page, GateTool()
    spec = AgentSpec(
        model=scripted([Reply.call("gate", id="g1"), Reply(text="Went on.")]), tools=[gate.tool]
    )
    store = FileStore(tmp_path / "sessions")
    worker_store = lambda: FileStore(tmp_path / "sessions")  # noqa: E731
    async with (
        helper_app(temporal, store, spec, worker_store) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await asyncio.wait_for(gate.started.wait(), 60)
        sid = await page.evaluate("state.sid")
        run_id = (await client.get(f"/v1/sessions/{sid}/runs")).json()["active"][0]
        cancelled = await client.post(f"/v1/sessions/{sid}/runs/{run_id}/cancel")
        assert cancelled.status_code == 202
        await eventually(_status(page, "cancelled"), within=60, interval=0.1, what="told")
        assert await page.is_disabled("#stop")
        await page.get_by_role("button", name="continue").click()
        await eventually(replied(page, "Went on."), within=60, interval=0.1, what="the reply")
        await eventually(quiet(page), within=60, interval=0.1, what="the run's end told")
        # a late end of the cancelled run (a resumed stream's, an answer to a status read, one
        # that came while the next run was being started) says nothing of the run after it
        late = "([id]) => frame('run', {run_id: id, status: 'cancelled'})"
        await page.evaluate(late, [run_id])
        await page.evaluate(
            "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))"
        )
        assert await quiet(page)(), await page.get_by_role("status").inner_text()


async def test_a_call_without_arguments_shows_none(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A call with no arguments is stored (and sent) without them: the page showed it as
    ``gate(undefined)``."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await store.create_session("calls")
    asked = MessageEntry(id="calls-0", message=user_message("Open it."))
    call = ToolCall(id="call-1", name="gate", arguments={})
    calling = MessageEntry(id="calls-1", parent_id="calls-0", message=assistant_message(call))
    await store.append_entries("calls", [asked, calling])
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})
    async with serving(app) as url:
        await page.goto(url + "/#calls")
        tools = page.locator(".msg.assistant .tools")
        await tools.wait_for()
        assert await tools.inner_text() == "→ gate({})"


async def test_a_page_opened_after_its_run_failed_says_why(
    temporal: Client | None,
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The page asks, is closed while the run works, and the run fails. Opened again (and
    reloaded), it said "no answer yet", as of a question no run was ever started on: the
    store keeps no run. The page remembers the run it started in the session and asks the
    server how it ended: it says the run failed and why; answered, it says nothing more."""
    page, model = browser_page, HeldThenRefused()
    store = FileStore(tmp_path / "sessions")
    worker_store = lambda: FileStore(tmp_path / "sessions")  # noqa: E731
    async with (
        helper_app(temporal, store, AgentSpec(model=model), worker_store) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await asyncio.wait_for(model.called.wait(), 60)
        # the model is called before the start's answer reaches the page, which remembers the
        # run it started (the stream may tell the run before that answer, or after)
        remembered = "localStorage.getItem('durable-agent-run:' + state.sid)"
        kept = await eventually(lambda: page.evaluate(remembered), within=20, what="run remembered")
        sid, run_id = await page.evaluate("state.sid"), json.loads(kept)["run"]
        await page.goto("about:blank")
        model.go.set()

        async def failed() -> bool:
            run = await client.get(f"/v1/sessions/{sid}/runs/{run_id}")
            return bool(run.json()["status"] == "failed")

        await eventually(failed, within=60, interval=0.1, what="the run failed")
        await page.goto(f"{url}/#{sid}")
        await eventually(_status(page, "HTTP 400"), within=60, interval=0.1, what="why")
        await page.reload()
        await eventually(_status(page, "HTTP 400"), within=60, interval=0.1, what="why again")
        assert "did not finish" in await page.locator("#chat .unfinished").inner_text()

        model.inner = scripted([Reply(text="Hello back.")])
        await page.get_by_role("button", name="answer").click()
        await eventually(replied(page, "Hello back."), within=60, interval=0.1, what="answered")
        await page.reload()
        await eventually(replied(page, "Hello back."), within=60, interval=0.1, what="reloaded")
        await eventually(lambda: page.evaluate("state.heard"), within=20, what="the stream")
        assert await page.get_by_role("status").inner_text() == ""


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


async def test_a_call_decided_elsewhere_first_is_no_failure(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Another client denies the call just before this page's approve reaches the server: the
    page showed its refusal (`ApprovalNotPendingError ... already decided`) in the status line
    as a failure, kept there after the prompt gave way to who decided what. The decision shown
    in the prompt's place says it; the status line stays clear."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply.call("send_email", {"to": "bob"}, id="c1"), Reply(text="Not sent.")]
    spec = AgentSpec(model=scripted(replies), tools=[send_email])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "Mail Bob.")
        await page.press("#text", "Enter")
        prompt = page.locator(".approval")
        await prompt.wait_for()
        sid = await page.evaluate("state.sid")
        statuses = (
            "window.said = []; new MutationObserver(() => said.push($('status').textContent))"
        )
        await page.evaluate(statuses + ".observe($('status'), {childList: true, subtree: true})")

        async def denied_first(route: Any) -> None:
            body = {"approved": False, "reason": "not now"}
            denied = await client.post(f"/v1/sessions/{sid}/approvals/c1", json=body)
            assert denied.status_code == 200, denied.text
            await route.continue_()

        await page.route("**/approvals/*", denied_first)
        async with page.expect_response("**/approvals/*") as answer:
            await prompt.locator("button", has_text="approve").click()
        assert (await answer.value).status == 409
        await eventually(replied(page, "Not sent."), within=20, interval=0.1, what="the reply")
        decided = await page.locator(".decision").all_inner_texts()
        assert decided == ['send_email({"to":"bob"}) denied by local: not now'], decided
        await eventually(quiet(page), within=20, interval=0.1, what="the run's end told")
        said = await page.evaluate("said")
    assert not [s for s in said if "Error" in s], said
