"""What a web page of another site can make a server do through the user's browser: a server
without keys (``durable-agent serve`` on loopback) takes no request a page of another site
sends (a cross-site form, a DNS-rebinding page), and the chat page cannot be framed
(docs/design.md#http-api)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import scripted, serving

KEYS = {"key-acme": {"principal": "ann", "prefix": "acme:"}}


def _open_app(tmp_path: Path) -> Any:
    return create_app(store=FileStore(tmp_path / "sessions"), agents={"a": _spec()})


def _spec() -> AgentSpec:
    return AgentSpec(model=scripted([]))


async def _ids(store: FileStore) -> list[str]:
    return [r.id for r in await store.list_sessions()]


async def test_a_server_without_keys_answers_its_loopback_names_only(tmp_path: Path) -> None:
    """A page of evil.example whose name the attacker then points at 127.0.0.1 (DNS
    rebinding) is the server's own origin to the browser: its requests name evil.example as
    their Host. A keyed server answers any name (a proxy's), its key being the check."""
    async with serving(_open_app(tmp_path)) as url, httpx.AsyncClient(base_url=url) as client:
        port = url.rsplit(":", 1)[1]
        for host in ["evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"]:
            for path in ["/v1/sessions", "/"]:
                r = await client.get(path, headers={"host": host})
                assert r.status_code == 403, (host, path, r.text)
                assert r.json()["error"]["type"] == "ForbiddenError", r.text
                assert "loopback" in r.json()["error"]["message"], r.text
        for host in [f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"]:
            r = await client.get("/v1/sessions", headers={"host": host})
            assert r.status_code == 200, (host, r.text)
        for host in [f"app.localhost:{port}", f"127.0.0.2:{port}", f"LOCALHOST.:{port}"]:
            r = await client.get("/v1/sessions", headers={"host": host})
            assert r.status_code == 200, (host, r.text)
    keyed = create_app(store=FileStore(tmp_path / "keyed"), agents={"a": _spec()}, keys=KEYS)
    async with serving(keyed) as url, httpx.AsyncClient(base_url=url) as client:
        headers = {"host": "agents.example.com", "authorization": "Bearer key-acme"}
        assert (await client.get("/v1/sessions", headers=headers)).status_code == 200
        assert (await client.get("/", headers={"host": "agents.example.com"})).status_code == 200


async def test_a_server_without_keys_takes_no_request_from_another_sites_page(
    tmp_path: Path,
) -> None:
    """A form of any site the user opens can POST to the server without a preflight (its
    body, or none, as the page likes): nothing it asks is done. A page served from this
    machine's loopback names (the chat page, a front-end's dev server) is served by a
    process that could reach the server anyway."""
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"a": _spec()})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        port = url.rsplit(":", 1)[1]
        for origin in ["https://evil.example", "null", f"http://evil.example:{port}"]:
            headers = {"origin": origin, "content-type": "application/x-www-form-urlencoded"}
            r = await client.post("/v1/sessions", headers=headers)
            assert r.status_code == 403, (origin, r.text)
            assert r.json()["error"]["type"] == "ForbiddenError", r.text
            assert await _ids(store) == []
        for origin in [url, f"http://localhost:{port}", "http://localhost:5173"]:
            r = await client.post("/v1/sessions", json={}, headers={"origin": origin})
            assert r.status_code == 201, (origin, r.text)
    keyed = create_app(store=FileStore(tmp_path / "keyed"), agents={"a": _spec()}, keys=KEYS)
    async with serving(keyed) as url, httpx.AsyncClient(base_url=url) as client:
        # a browser sends no key on its own: a keyed request of another origin is the
        # deployment's front-end (cross-origin by its own CORS choice)
        headers = {"origin": "https://app.example.com", "authorization": "Bearer key-acme"}
        assert (await client.post("/v1/sessions", json={}, headers=headers)).status_code == 201


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("this test needs Chromium: make chromium", pytrace=False)
    return found


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """Chromium resolving ``rebind.test`` to 127.0.0.1: what a DNS-rebinding attack makes of
    the attacker's own name once the page is loaded."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        args = ["--no-sandbox", "--host-resolver-rules=MAP rebind.test 127.0.0.1"]
        browser = await pw.chromium.launch(executable_path=_chromium(), args=args)
        try:
            yield browser
        finally:
            await browser.close()


async def test_a_web_page_the_user_opens_cannot_drive_a_local_server(
    tmp_path: Path, browser: Any
) -> None:
    """In a real browser: a page of evil.test submits an empty form to the server (which
    made a session), and a page under the rebound name rebind.test reads the session list
    as its own origin (it read every session's ID, and could read any transcript)."""
    store = FileStore(tmp_path / "sessions")
    await store.create_session("private")
    app = create_app(store=store, agents={"a": _spec()})
    async with serving(app) as url:
        page = await browser.new_page()
        form = f'<form id="f" method="post" action="{url}/v1/sessions" enctype="text/plain">'
        html = f"<html><body>{form}</form></body></html>"

        async def attacker(route: Any) -> None:
            await route.fulfill(body=html, content_type="text/html")

        await page.route("http://evil.test/", attacker)
        await page.goto("http://evil.test/")
        async with page.expect_navigation():
            await page.evaluate("document.getElementById('f').submit()")
        assert page.url == f"{url}/v1/sessions"  # the form went to the server
        assert json.loads(await page.inner_text("pre"))["error"]["type"] == "ForbiddenError"
        assert await _ids(store) == ["private"]

        port = url.rsplit(":", 1)[1]
        await page.goto(f"http://rebind.test:{port}/")
        read = "fetch('/v1/sessions').then(async r => [r.status, await r.text()])"
        status, body = await page.evaluate(read)
        assert status == 403, body
        assert "private" not in body


async def test_the_chat_page_is_framed_by_no_other_site(tmp_path: Path, browser: Any) -> None:
    """A page of another site that frames the chat page can lay its own bait over the
    approve button (clickjacking): the page refuses to be framed, and it runs only its own
    files (the browser takes no file of it for another type)."""
    attacker = FastAPI()
    async with serving(_open_app(tmp_path)) as url:
        frame = f'<iframe src="{url}/" width="800" height="600"></iframe>'

        @attacker.get("/")
        async def bait() -> HTMLResponse:
            return HTMLResponse(f"<html><body>{frame}</body></html>")

        async with serving(attacker) as bait_url:
            page = await browser.new_page()
            # a name resolved to loopback: Chromium blocks a public page's frame of a
            # loopback server on its own (not every browser does, nor for a keyed server)
            await page.goto(bait_url.replace("127.0.0.1", "rebind.test") + "/")
            framed = page.frames[-1]
            await framed.wait_for_load_state()
            assert framed.url != f"{url}/"  # the browser's error page instead
            assert not await framed.locator("#ask").count()
        async with httpx.AsyncClient(base_url=url) as client:
            for path in ["/", "/app.js", "/app.css"]:
                headers = (await client.get(path)).headers
                assert headers["x-content-type-options"] == "nosniff", path
                assert headers["x-frame-options"] == "DENY", path
                policy = headers["content-security-policy"]
                assert "frame-ancestors 'none'" in policy and "default-src 'self'" in policy
