"""The chat page reads as a chat: Enter sends, Shift+Enter starts a new line, and a reader
scrolled up to read keeps their place while replies come in (Playwright driving the system
Chromium against a real server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from durable_agent import MessageEntry
from durable_agent.ai import Reply
from durable_agent.ai.messages import TextContent, assistant_message, user_message
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

LONG = "\n".join(f"line {n}" for n in range(40))


async def test_enter_sends_and_a_reader_scrolled_up_keeps_their_place(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text=f"First. {LONG}"), Reply(text="Second."), Reply(text="Third.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    async with serving(app) as url:
        await page.set_viewport_size({"width": 900, "height": 500})
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await eventually(replied(page, "First."), within=30, interval=0.1, what="the reply")
        await page.press("#text", "t")
        await page.press("#text", "Shift+Enter")
        await page.press("#text", "u")
        assert await page.input_value("#text") == "t\nu"  # a new line, nothing sent
        await page.press("#text", "Enter")
        await eventually(replied(page, "Second."), within=30, interval=0.1, what="the reply")
        users = await page.locator(".msg.user").all_inner_texts()
        assert [u.split("\n")[:2] for u in users][-1] == ["t", "u"], users
        chat = page.locator("#chat")
        assert await chat.evaluate("c => c.scrollHeight > c.clientHeight + 200")
        at_end = "c => c.scrollHeight - c.scrollTop - c.clientHeight < 2"
        assert await chat.evaluate(at_end)  # who asked follows the answer
        await chat.evaluate("c => { c.scrollTop = 0; }")  # the reader goes up to read
        sid = (await store.list_sessions())[0].id
        async with httpx.AsyncClient(base_url=url) as client:  # a run the page did not start
            started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "more"})
            assert started.status_code == 202, started.text
        await eventually(replied(page, "Third."), within=30, interval=0.1, what="the reply")
        assert await chat.evaluate("c => c.scrollTop") == 0


async def test_a_compaction_shows_where_the_model_starts_reading(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A compaction (here made through the API while the page is open) shows in the chat as its
    summary, after the messages it stands for: what the model now reads instead of them."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="First."), Reply(text="The summary of it all.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await eventually(replied(page, "First."), within=30, interval=0.1, what="the reply")
        sid = (await store.list_sessions())[0].id
        async with httpx.AsyncClient(base_url=url) as client:
            compacted = await client.post(f"/v1/sessions/{sid}/compact", json={"keep_turns": 0})
            assert compacted.status_code == 200, compacted.text
        entry_id = compacted.json()["entry"]["id"]
        marker = page.locator(f".msg.compaction[data-id='{entry_id}']")

        async def shown() -> bool:
            count: int = await marker.count()
            return count == 1

        await eventually(shown, within=30, interval=0.1, what="the compaction on the page")
        assert "The summary of it all." in await marker.inner_text()
        order = await page.locator("#chat .msg").evaluate_all("ms => ms.map(m => m.className)")
        assert order == ["msg user", "msg assistant", "msg compaction"], order


async def test_a_session_opens_on_its_last_branch(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A question edited (a second branch from its parent) and answered there, then the page
    opened: it showed the first branch, the old question and answer, with "1/2" by it, and what
    the user typed next went on from the old answer. The session's leaf is its last entry
    stored (docs/design.md#store-contract): the page opens on it and goes on from it."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    said = [
        ("q1", None, user_message("first question")),
        ("a1", "q1", assistant_message(TextContent(text="First answer."))),
        ("q2", "a1", user_message("old question")),
        ("a2", "q2", assistant_message(TextContent(text="Old answer."))),
        ("q3", "a1", user_message("edited question")),
        ("a3", "q3", assistant_message(TextContent(text="Edited answer."))),
    ]
    await store.create_session("s1")
    await store.append_entries(
        "s1", [MessageEntry(id=i, parent_id=p, message=m) for i, p, m in said]
    )
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Next.")]))}
    )
    async with serving(app) as url:
        await page.goto(url + "/#s1")
        await eventually(replied(page, "Edited answer."), within=20, interval=0.1, what="it")
        assert await page.locator(".msg", has_text="Old answer.").count() == 0
        await page.fill("#text", "and then?")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Next."), within=20, interval=0.1, what="the reply")
    entries = {e.id: e for e in await store.load_entries("s1") if isinstance(e, MessageEntry)}
    asked = next(e for e in entries.values() if e.message.text() == "and then?")
    assert asked.parent_id == "a3"
