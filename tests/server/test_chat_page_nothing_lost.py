"""The chat page loses nothing: what a user types as the run ends (the page still shows it
working, the server has no run that takes a message) starts a new run, a request that fails
leaves the text in the box, and a stream refused while a server or its store comes back (a
deploy) is asked for again until it is served (Playwright driving the system Chromium against a
real server)."""

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
from tests.server.support import free_port, replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.gate_tool import GateTool
from tests.support.polling import eventually


async def test_a_message_typed_as_the_run_ends_starts_a_run(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    gate = GateTool()
    replies = [Reply.call("gate", id="g1"), Reply(text="First done."), Reply(text="Seen it.")]
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=scripted(replies), tools=[gate.tool])}
    )
    runs = app.state.server.runs
    refused: list[int] = []

    async def after_the_run_ended(route: Any) -> None:
        sid = route.request.url.split("/v1/sessions/")[1].split("/")[0]
        gate.release.set()

        async def ended() -> bool:
            return not await runs.active(sid)

        await eventually(ended, within=30, interval=0.05, what="the run's end")
        response = await route.fetch()
        refused.append(response.status)
        await route.fulfill(response=response)

    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.click("#send")
        await eventually(gate.started.wait, within=30, what="the tool running")
        await page.route("**/v1/sessions/*/messages", after_the_run_ended)
        await page.fill("#text", "and one more thing")
        await page.click("#send")

        await eventually(
            replied(page, "Seen it."), within=30, interval=0.1, what="the new run's reply"
        )
        sid = (await store.list_sessions())[0].id
        said = [
            (e.message.role, e.message.text())
            for e in await store.load_entries(sid)
            if isinstance(e, MessageEntry) and e.message.role != "tool_result"
        ]
    assert refused == [409]  # the message reached the server after its run ended
    assert said[-2:] == [("user", "and one more thing"), ("assistant", "Seen it.")]


async def test_what_could_not_be_sent_goes_back_into_the_box(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page = browser_page
    two = {name: AgentSpec(model=scripted([Reply(text="hi")])) for name in ("a", "b")}
    app = create_app(store=FileStore(tmp_path / "sessions"), agents=two)  # no default agent
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "a long question I would not want to type again")
        await page.click("#send")

        async def refused() -> bool:
            return "UnknownAgentError" in await page.locator("#status").inner_text()

        await eventually(refused, within=30, interval=0.1, what="the refusal")
        box = await page.input_value("#text")
        # the refusal stays in view while the stream redraws the page (another client's run)
        sid = (await page.evaluate("state.sid")) or ""
        started = await client.post(f"/v1/sessions/{sid}/runs", json={"text": "x", "agent": "a"})
        assert started.status_code == 202, started.text

        await eventually(replied(page, "hi"), within=30, interval=0.1, what="the other run's reply")
        assert await refused()
    assert box == "a long question I would not want to type again"


async def test_a_stream_refused_for_a_while_is_asked_for_again(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Back.")]))}
    )
    asked: list[str] = []

    async def refused_twice(route: Any) -> None:
        asked.append(route.request.headers.get("last-event-id", ""))
        if len(asked) <= 2:  # as a proxy answers while the server restarts
            status = 503 if len(asked) == 1 else 502
            await route.fulfill(status=status, body="restarting")
        else:
            await route.continue_()

    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": "deploy"})
        await page.route("**/v1/sessions/*/stream", refused_twice)
        await page.goto(url + "/#deploy")
        await eventually(lambda: _is_live(page), within=30, interval=0.05, what="the stream")
        started = await client.post("/v1/sessions/deploy/runs", json={"text": "Still there?"})
        assert started.status_code == 202, started.text

        await eventually(
            replied(page, "Back."), within=30, interval=0.1, what="the reply on the page"
        )
    assert len(asked) == 3, asked


async def _is_live(page: Any) -> bool:
    return bool(await page.evaluate("state.heard"))


async def test_a_page_whose_session_was_made_again_shows_the_new_one(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The session is deleted and created again under its ID while the server restarts (the
    page hears of neither): the seq it resumes at is no seq of the new session (400), so it
    starts over and shows the new session, not the old one."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Old."), Reply(text="New.")]
    spec = AgentSpec(model=scripted(replies))
    asked: list[str] = []

    async def recorded(route: Any) -> None:
        asked.append(route.request.headers.get("last-event-id", ""))
        await route.continue_()

    port = free_port()
    async with serving(create_app(store=store, agents={"helper": spec}), port) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            started = await client.post("/v1/sessions/again/runs", json={"text": "First?"})
            assert started.status_code == 202, started.text
        await page.route("**/v1/sessions/*/stream", recorded)
        await page.goto(url + "/#again")
        await eventually(replied(page, "Old."), within=30, interval=0.1, what="the old reply")
    await store.delete_session("again")
    await store.create_session("again")
    async with (
        serving(create_app(store=store, agents={"helper": spec}), port) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await eventually(lambda: _resumed(asked), within=30, interval=0.05, what="a reconnect")
        started = await client.post("/v1/sessions/again/runs", json={"text": "Second?"})
        assert started.status_code == 202, started.text
        await eventually(replied(page, "New."), within=30, interval=0.1, what="the new reply")
        shown = await page.locator("#chat").inner_text()
    assert "Old." not in shown and "First?" not in shown
    assert asked[-1] == "0", asked  # it started over


async def _resumed(asked: list[str]) -> bool:
    return "2" in asked[1:]  # back at the old session's last seq


async def test_a_deleted_session_is_said_gone_and_not_made_again(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A session deleted while a page shows it stayed on that page, its title and messages, with
    nothing said. Reloaded (its stream answers 404), the page showed it as an empty session:
    a message typed there made the deleted session again under its ID, and its reply never
    showed (the page had stopped following), "working…" for ever. The page says the session is
    gone and shows none of it; what is typed next starts a new session, whose reply shows."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Hi."), Reply(text="Fresh start.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the reply")
        sid = await page.evaluate("state.sid")
        assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

        async def told(says: str) -> bool:
            status = await page.get_by_role("status").inner_text()
            return says in status and await page.locator("#chat .msg").count() == 0

        await eventually(lambda: told("deleted"), within=20, interval=0.1, what="gone")
        assert await page.inner_text("#title") == "No session"
        await page.goto(url + f"/#{sid}")
        await page.reload()
        await eventually(lambda: told("not found"), within=20, interval=0.1, what="not found")
        await page.fill("#text", "anyone?")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Fresh start."), within=20, interval=0.1, what="the reply")
        assert await page.evaluate("state.sid") != sid
    assert sid not in {s.id for s in await store.list_sessions()}


async def test_a_message_sent_while_a_new_session_is_made_goes_into_it(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """ "New session", then a question typed and sent before the server has answered that
    request: the question went to the session still shown (the old one) and its answer was
    never seen, the page switching to the new, empty session the moment it came. It now waits
    for the new session and goes there."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Hi."), Reply(text="B.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    asked, answer = asyncio.Event(), asyncio.Event()

    async def held(route: Any) -> None:  # the new session's request, answered when let go
        if route.request.method != "POST":
            await route.continue_()
            return
        asked.set()
        await answer.wait()
        await route.continue_()

    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "one")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Hi."), within=30, interval=0.1, what="the reply")
        first = await page.evaluate("state.sid")
        await page.route("**/v1/sessions", held)
        await page.get_by_role("button", name="new session").click()
        await eventually(asked.wait, within=30, what="the new session asked for")
        await page.fill("#text", "two")
        await page.press("#text", "Enter")
        answer.set()
        await eventually(replied(page, "B."), within=30, interval=0.1, what="the answer shown")
        second = await page.evaluate("state.sid")
        said = {
            sid: [
                e.message.text()
                for e in await store.load_entries(sid)
                if isinstance(e, MessageEntry) and e.message.role == "user"
            ]
            for sid in (first, second)
        }
    assert second != first
    assert said == {first: ["one"], second: ["two"]}, said
