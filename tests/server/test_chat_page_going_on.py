"""The chat page lets a user go on where the server left them: a run cut off by a restart of
the server (its in-process run dies with it), more sessions than one page of the list, a message
edited in place (Playwright driving the system Chromium against a real server)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_agent import MessageEntry
from durable_agent.ai import Reply, ScriptedModel
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import free_port, lookup, quiet, replied, serving, tool_script
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.server.test_chat_page_access import HEARD
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually

SERVER = """
import sys, uvicorn
from durable_agent.ai import Reply, ScriptedModel
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
slow = Reply(text="A long answer, word by word. " * 40, chunk_size=4, chunk_delay=0.1)
spec = AgentSpec(model=ScriptedModel([slow]))
app = create_app(store=FileStore(sys.argv[1]), agents={"helper": spec})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""
"""A server whose one run streams a reply slowly, in a process of its own (to be killed)."""


@asynccontextmanager
async def _server_process(root: Path, port: int, ending: signal.Signals) -> AsyncIterator[str]:
    """:data:`SERVER` on ``port``; ends with ``ending`` (SIGKILL: no goodbye, its run's task
    dies with it; SIGTERM: uvicorn's shutdown, which cancels its runs)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, str(root), str(port))
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as client:

            async def up() -> bool:
                try:
                    return (await client.get("/")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(up, within=30, interval=0.1, what="the server up")
        yield url
    finally:
        proc.send_signal(ending)
        async with asyncio.timeout(10):
            await proc.wait()


def _said(entries: list[Any]) -> list[tuple[str, str, str | None]]:
    return [
        (e.message.role, e.message.text()[:6], e.message.stop_reason)
        for e in entries
        if isinstance(e, MessageEntry)
    ]


@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGTERM])
async def test_a_run_cut_off_by_a_restart_says_so_and_goes_on(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
    ending: signal.Signals,
) -> None:
    """The server restarts mid-reply: its run dies with it (killed, nothing stored after the
    question; stopped, the reply so far stored as cut off) and the new server knows nothing of
    it. The page used to go quiet: an empty status, the dead reply's text still shown as being
    written, or the cut-off reply shown as if whole. It says the run did not finish, and so
    it does reloaded (the page remembers the run it started). Its button answers the question,
    not asked twice, or goes on from the cut reply, kept on the path."""
    page, root, port = browser_page, tmp_path / "sessions", free_port()
    async with _server_process(root, port, ending) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await page.locator(".msg.live").wait_for()
        sid = await page.evaluate("state.sid")
        # the stream may show the reply before the start's answer, which remembers the run
        remembered = "localStorage.getItem('durable-agent-run:' + state.sid)"
        await eventually(lambda: page.evaluate(remembered), within=20, what="run remembered")
    store = FileStore(root)
    again = AgentSpec(model=ScriptedModel([Reply(text="Back again.")]))
    async with serving(create_app(store=store, agents={"helper": again}), port):

        def told(says: str) -> Any:
            async def probe() -> bool:
                status = await page.get_by_role("status").inner_text()
                return bool(await page.evaluate("state.heard")) and says in status

            return probe

        await eventually(told("did not finish"), within=30, interval=0.1, what="the page told")
        assert await page.locator(".msg.live").count() == 0, "the dead run's text is shown"
        await page.reload()
        killed = ending == signal.SIGKILL
        told_again = told("did not finish")
        await eventually(told_again, within=30, interval=0.1, what="the page told after a reload")
        go_on = page.get_by_role("button", name="answer" if killed else "continue")
        await go_on.focus()
        await page.keyboard.press("Enter")
        await eventually(replied(page, "Back again."), within=30, interval=0.1, what="the answer")
        await eventually(quiet(page), within=30, interval=0.1, what="the run's end told")
        assert await go_on.count() == 0
        entries = await store.load_entries(sid)
    said = _said(entries)
    if ending == signal.SIGKILL:
        assert said == [("user", "hello", None), ("assistant", "Back a", "stop")], said
    else:  # the cut-off reply stays, on the path: the answer goes on from it
        assert said == [
            ("user", "hello", None),
            ("assistant", "A long", "aborted"),
            ("assistant", "Back a", "stop"),
        ], said
        assert entries[2].parent_id == entries[1].id


async def test_a_run_that_answers_is_never_said_unfinished(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The question stored before the page hears its run started is no run cut off: a screen
    reader hears no "did not finish" as a run starts, nor as its tool's result waits for the
    model."""
    page = browser_page
    replies = [*tool_script("Sunny first."), *tool_script("Sunny again.")]
    spec = AgentSpec(model=ScriptedModel(replies), tools=[lookup])
    app = create_app(store=FileStore(tmp_path / "sessions"), agents={"helper": spec})
    await page.add_init_script(HEARD)
    async with serving(app) as url:
        await page.goto(url + "/")
        for answer in ("Sunny first.", "Sunny again."):  # a new session's run, then a live one's
            await page.fill("#text", "and the weather?")
            await page.press("#text", "Enter")
            await eventually(replied(page, answer), within=30, interval=0.1, what="the answer")
        heard = await page.evaluate("window.heard")
    assert not [h for h in heard if "did not finish" in h], heard


async def test_sessions_past_the_first_hundred_are_reached(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The list showed the newest 100 sessions and no way to the others. A labelled "more
    sessions" button, reached with Tab after the last one, loads the next ones (the focus
    going to the first of them); one opened stays in the list, marked."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    for n in range(105):
        await store.create_session(f"s{n:03d}")
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel([]))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        listed = (await client.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
        oldest = [s["session_id"] for s in listed][100:]
        await page.goto(url + "/")
        items = page.locator("#sessions li button")
        more = page.get_by_role("button", name="more sessions")
        await eventually(lambda: _count(more, 1), within=20, interval=0.05, what="the list")
        assert await items.count() == 100
        await items.nth(99).focus()
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.textContent") == "more sessions"
        await page.keyboard.press("Enter")
        await eventually(lambda: _count(more, 0), within=20, interval=0.05, what="the next page")
        assert await page.evaluate("document.activeElement.textContent") == oldest[0]
        assert await items.count() == 105
        await page.keyboard.press("Tab")
        await page.keyboard.press("Enter")

        async def opened() -> bool:
            return bool(await page.evaluate("state.sid") == oldest[1])

        await eventually(opened, within=20, interval=0.05, what="the old session opened")
        chosen = page.get_by_role("button", name=oldest[1], exact=True)
        await eventually(lambda: _current(chosen), within=20, interval=0.05, what="marked")


async def _count(locator: Any, n: int) -> bool:
    return bool(await locator.count() == n)


async def _current(locator: Any) -> bool:
    return bool(await locator.count() == 1 and await locator.get_attribute("aria-current"))


async def _focused(page: Any) -> str:
    script = "(a => a.getAttribute('aria-label') || a.textContent || a.id)(document.activeElement)"
    return str(await page.evaluate(script))


async def test_a_message_is_edited_in_place(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Edit used a browser prompt box (not styled, modal, no multi-line text). It opens a
    labelled box in the message: Escape cancels (the focus back on edit, nothing sent), a draft
    survives the chat being drawn again (another client's run), Shift+Enter starts a line and
    Enter saves, which asks the edited question from the original's parent (a branch)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Hi."), Reply(text="Other."), Reply(text="Second.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(replies))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "Mail Ann.")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the reply")
        sid = await page.evaluate("state.sid")
        edit = page.get_by_role("button", name="edit")
        box = page.get_by_role("textbox", name="Edit your message")
        await edit.focus()
        await page.keyboard.press("Enter")
        assert await _focused(page) == "Edit your message"
        assert await box.input_value() == "Mail Ann."
        assert await page.get_by_role("button", name="save").count() == 1
        assert await page.get_by_role("button", name="cancel").count() == 1
        await page.keyboard.press("Escape")
        assert await box.count() == 0
        assert await _focused(page) == "edit"
        await page.keyboard.press("Enter")
        await page.keyboard.press("ControlOrMeta+a")
        await page.keyboard.type("Mail Bob.")
        started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "x"})
        assert started.status_code == 202, started.text
        await eventually(replied(page, "Other."), within=20, interval=0.1, what="the other run")
        assert await _focused(page) == "Edit your message"
        await page.keyboard.press("Shift+Enter")
        await page.keyboard.type("Thanks.")
        await page.keyboard.press("Enter")
        await eventually(replied(page, "Second."), within=20, interval=0.1, what="the answer")
        assert await box.count() == 0
        entries = [e for e in await store.load_entries(sid) if isinstance(e, MessageEntry)]
    asked = [(e.message.text(), e.parent_id) for e in entries if e.message.role == "user"]
    assert asked[0] == ("Mail Ann.", None) and asked[-1] == ("Mail Bob.\nThanks.", None), asked
    assert len(asked) == 3, asked


async def test_a_branch_refused_while_a_run_goes_leaves_the_chat_as_it_was(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Retry or edit while a run goes is refused (409): the view had moved to the question's
    parent and stayed there, the going run's reply never shown. The chat stays where it was
    and shows that reply; the edited text is put back in its box."""
    page, store, gate = browser_page, FileStore(tmp_path / "sessions"), GateTool()
    replies = [Reply(text="Hi."), Reply.call("gate", id="g1"), Reply(text="Gate done.")]
    spec = AgentSpec(model=ScriptedModel(replies), tools=[gate.tool])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url:
        await page.goto(url + "/")
        for question in ("one", "two"):
            await page.fill("#text", question)
            await page.press("#text", "Enter")
            if question == "one":
                await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the reply")
        await eventually(gate.started.wait, within=20, what="the tool running")
        await page.get_by_role("button", name="retry").first.click()
        await eventually(lambda: _status(page, "RunActiveError"), within=20, what="the refusal")
        await page.get_by_role("button", name="edit").first.click()
        await page.keyboard.press("ControlOrMeta+a")
        await page.keyboard.type("changed")
        await page.keyboard.press("Enter")
        box = page.get_by_role("textbox", name="Edit your message")
        await eventually(lambda: _count(box, 1), within=20, interval=0.05, what="the box back")
        assert await box.input_value() == "changed"
        gate.release.set()
        await eventually(replied(page, "Gate done."), within=20, interval=0.1, what="the reply")


async def _status(page: Any, text: str) -> bool:
    return text in await page.get_by_role("status").inner_text()


async def test_a_refused_new_session_is_told_and_an_edit_stays_with_its_session(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """New session, fork and stop left a refusal as an uncaught promise rejection (a script
    error; the fixture fails on one): a new session asked of a server that is gone is told in
    the status line only. An edit box opened in one session was still open, with its draft,
    when the user came back to that session from another."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Hi."), Reply(text="Other.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=ScriptedModel(replies))})
    async with serving(app) as url:
        await page.goto(url + "/")
        for question, answer in (("one", "Hi."), ("two", "Other.")):
            if question == "two":
                await page.get_by_role("button", name="new session").click()
            await page.fill("#text", question)
            await page.press("#text", "Enter")
            await eventually(replied(page, answer), within=20, interval=0.1, what="the reply")
        second = await page.evaluate("state.sid")
        first = next(s.id for s in await store.list_sessions() if s.id != second)
        await page.get_by_role("button", name="edit").click()
        await page.get_by_role("button", name=first).click()
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the first")
        await page.get_by_role("button", name=second).click()
        await eventually(replied(page, "Other."), within=20, interval=0.1, what="the second")
        assert await page.get_by_role("textbox", name="Edit your message").count() == 0
    await page.get_by_role("button", name="new session").click()  # the server is gone
    await eventually(lambda: _status(page, "network"), within=20, what="the refusal told")


async def test_a_message_goes_on_from_the_branch_shown(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """While a run goes on one branch, the user switches to another and types: the message was
    shown queued on the branch in view, then sent into the run on the other branch, where it
    was stored and answered, gone from the branch the user was reading. It is refused there
    (a run goes: 409), the text staying in the box; once the run ends, Enter sends it from the
    branch shown."""
    page, store, gate = browser_page, FileStore(tmp_path / "sessions"), GateTool()
    replies = [Reply(text="A1."), Reply(text="A2."), Reply.call("gate", id="g1")]
    replies += [Reply(text="Gate done."), Reply(text="Three done.")]
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=ScriptedModel(replies), tools=[gate.tool])}
    )
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "one")
        await page.press("#text", "Enter")
        await eventually(replied(page, "A1."), within=20, interval=0.1, what="the reply")
        await page.get_by_role("button", name="retry").click()
        await eventually(replied(page, "A2."), within=20, interval=0.1, what="the retry")
        await page.fill("#text", "two")
        await page.press("#text", "Enter")
        await eventually(gate.started.wait, within=20, what="the tool running")
        await page.get_by_role("button", name="previous branch").click()
        await page.fill("#text", "three")
        await page.press("#text", "Enter")
        await eventually(lambda: _status(page, "RunActiveError"), within=20, what="the refusal")
        assert await page.input_value("#text") == "three"
        assert await page.locator(".msg.queued").count() == 0
        gate.release.set()
        await eventually(lambda: _idle(page), within=20, interval=0.1, what="the run's end")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Three done."), within=20, interval=0.1, what="the answer")
        entries = await store.load_entries(await page.evaluate("state.sid"))
    said = {e.id: e for e in entries if isinstance(e, MessageEntry)}
    three = next(e for e in said.values() if e.message.text() == "three")
    assert three.parent_id is not None and said[three.parent_id].message.text() == "A1."


async def _idle(page: Any) -> bool:
    return bool(await page.evaluate("!working()"))
