"""Paging the reads: ``GET /v1/sessions/{id}/entries?after=N&limit=M`` and ``GET /v1/sessions``
say whether more follow (``"more"``), so a client stops at the last full page instead of asking
once more for an empty one."""

from __future__ import annotations

from pathlib import Path

import httpx

from durable_agent.server import create_app
from durable_agent.stores import FileStore
from tests.server.support import serving
from tests.support.conformance import msg


async def test_entry_pages_say_whether_more_follow(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    await store.create_session("s")
    await store.append_entries("s", [msg(f"e{i}", f"text {i}") for i in range(1, 6)])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        pages, after = [], 0
        while True:
            page = await client.get("/v1/sessions/s/entries", params={"after": after, "limit": 2})
            assert page.status_code == 200, page.text
            body = page.json()
            pages.append(([e["seq"] for e in body["entries"]], body["more"]))
            if not body["more"]:
                break
            after = body["entries"][-1]["seq"]
        assert pages == [([1, 2], True), ([3, 4], True), ([5], False)]
        exact = (await client.get("/v1/sessions/s/entries", params={"after": 1, "limit": 4})).json()
        assert [e["seq"] for e in exact["entries"]] == [2, 3, 4, 5] and exact["more"] is False
        past = (await client.get("/v1/sessions/s/entries", params={"after": 9})).json()
        assert past == {"entries": [], "more": False}


async def test_session_pages_say_whether_more_follow(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    for sid in ("a", "b", "c"):
        await store.create_session(sid)
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        first = (await client.get("/v1/sessions", params={"limit": 2})).json()
        assert len(first["sessions"]) == 2 and first["more"] is True
        last = (await client.get("/v1/sessions", params={"limit": 2, "offset": 2})).json()
        assert len(last["sessions"]) == 1 and last["more"] is False
        whole = (await client.get("/v1/sessions", params={"limit": 3})).json()
        assert len(whole["sessions"]) == 3 and whole["more"] is False
