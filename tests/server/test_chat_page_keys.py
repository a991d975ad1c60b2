"""The chat page on a server with API keys: a link to a session opened before the key is given
shows the session once the key is typed, a wrong key is told, and the key stays in the page's
own origin (Playwright driving the system Chromium against a real server)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from durable_agent import MessageEntry
from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import quiet, replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

KEYS = {"key-acme": {"principal": "ann", "prefix": "acme:"}}
DRAINED = "new Promise((done) => setTimeout(() => setTimeout(done, 0), 0))"
"""Two turns of the page's task queue: a response whose body arrived is read by then."""


async def _status(page: Any, text: str) -> bool:
    return text in await page.get_by_role("status").inner_text()


async def _key(page: Any, key: str) -> None:
    await page.fill("#key", key)
    await page.dispatch_event("#key", "change")


async def test_a_session_linked_before_its_key_shows_once_the_key_is_given(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A link to a session opened with no key (or a wrong one) is refused (401), and the page
    said so; typing the right key brought the session list but not the session: its stream had
    stopped at the 401 and was not asked for again, the refusal stayed in the status line, a
    message typed there was never answered on the page ("working…" for ever), and each key
    refused was an uncaught promise rejection (a script error). The key given, the session
    shows and goes on; the key is in the page's own storage, never in its URL."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Hi."), Reply(text="Again.")]))
    app = create_app(store=store, agents={"helper": spec}, keys=KEYS)
    headers = {"authorization": "Bearer key-acme"}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, headers=headers) as client:
        started = await client.post("/v1/sessions/acme:s1/runs", json={"text": "hello"})
        assert started.status_code == 202, started.text
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(url + "/#acme:s1")
        await eventually(lambda: _status(page, "UnauthorizedError"), within=20, what="told")
        await _key(page, "not-a-key")
        await eventually(lambda: _status(page, "UnauthorizedError"), within=20, what="told")
        await _key(page, "key-acme")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the session")
        await eventually(quiet(page), within=20, interval=0.1, what="the refusal gone")
        assert errors == [], errors
        await page.fill("#text", "once more")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Again."), within=20, interval=0.1, what="the reply")
        assert "key-acme" not in page.url
        stored = await page.evaluate("JSON.stringify(localStorage)")
    assert "key-acme" in stored  # this origin's storage: no other site's page reads it
    said = [
        e.message.text() for e in await store.load_entries("acme:s1") if isinstance(e, MessageEntry)
    ]
    assert [t for t in said if t] == ["hello", "Hi.", "once more", "Again."], said


async def test_a_refusal_of_a_key_no_longer_given_is_not_told(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A wrong key, then the right one before the wrong one's requests are answered: the
    wrong key's late 401 (the session list asked with it) was told in the status line after
    the right key had brought the session, as if the key in the box were refused."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted([Reply(text="Hi.")]))
    app = create_app(store=store, agents={"helper": spec}, keys=KEYS)
    headers = {"authorization": "Bearer key-acme"}
    asked, answer = asyncio.Event(), asyncio.Event()

    async def held(route: Any) -> None:  # the list asked with the wrong key, answered when let go
        if route.request.headers.get("authorization") != "Bearer not-a-key":
            await route.continue_()
            return
        asked.set()
        await answer.wait()
        await route.continue_()

    async with serving(app) as url, httpx.AsyncClient(base_url=url, headers=headers) as client:
        started = await client.post("/v1/sessions/acme:s1/runs", json={"text": "hello"})
        assert started.status_code == 202, started.text
        await page.goto(url + "/#acme:s1")
        await eventually(lambda: _status(page, "UnauthorizedError"), within=20, what="told")
        await page.route("**/v1/sessions?*", held)
        await _key(page, "not-a-key")
        await eventually(asked.wait, within=20, what="the list asked with the wrong key")
        await _key(page, "key-acme")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the session")
        await eventually(quiet(page), within=20, interval=0.1, what="the refusal gone")
        wrong = "Bearer not-a-key"
        async with page.expect_response(
            lambda r: r.request.headers.get("authorization") == wrong
        ) as late:
            answer.set()
        assert (await late.value).status == 401
        await (await late.value).finished()
        await page.evaluate(DRAINED)  # the page has read the late answer's body
        assert await page.get_by_role("status").inner_text() == ""
