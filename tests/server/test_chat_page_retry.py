"""The chat page names each run it starts, so a start whose answer the network lost is sent again
and the server starts nothing more: one question, one run, one reply; a proxy's error page is
shown by its status and the question stays in the box (Playwright driving the system Chromium
against a real server)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from durable_agent import MessageEntry
from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually


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
