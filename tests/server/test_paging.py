"""Paging the reads: ``GET /v1/sessions/{id}/entries?after=N&limit=M`` and ``GET /v1/sessions``
say whether more follow (``"more"``), so a client stops at the last full page instead of asking
once more for an empty one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from durable_agent import MessageEntry
from durable_agent.ai import TextContent, tool_result_message
from durable_agent.durable.limits import PAYLOAD_LIMIT
from durable_agent.server import create_app, routes_sessions
from durable_agent.server.routes_sessions import PAGE_BYTES
from durable_agent.session import Entry
from durable_agent.stores import FileStore
from tests.server.support import serving, stream
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


async def test_an_entry_page_is_bounded_in_bytes_as_well_as_in_entries(tmp_path: Path) -> None:
    """Tool results near the entry limit (1.5 MiB each): a page of the default 1000 entries
    would answer hundreds of MiB in one body. A page stops at :data:`PAGE_BYTES` of entries
    (``more`` then says the rest follow), with one entry at least so a client always moves on;
    paged through, the client gets every entry once, in seq order."""
    store = FileStore(tmp_path / "sessions")
    await store.create_session("big")
    bulky = "x" * (PAYLOAD_LIMIT - 4096)  # a tool result just under the entry limit
    results = [
        MessageEntry(
            id=f"r{i}",
            parent_id=f"r{i - 1}" if i else None,
            message=tool_result_message(f"c{i}", "fetch", TextContent(text=bulky)),
        )
        for i in range(8)
    ]
    for entry in results:  # one a call: a call's batch has a limit of its own
        await store.append_entries("big", [entry])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        seen: list[int] = []
        while True:
            after = seen[-1] if seen else 0
            page = await client.get("/v1/sessions/big/entries", params={"after": after})
            assert page.status_code == 200, page.text[:200]
            assert len(page.content) <= PAGE_BYTES, len(page.content)
            body = page.json()
            assert body["entries"], "a page holds one entry at least"
            seen += [e["seq"] for e in body["entries"]]
            if not body["more"]:
                break
        assert seen == list(range(1, 9))


async def test_an_entry_over_the_page_bytes_comes_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry bigger than a page's bytes (a server configured with a smaller page) still
    comes, one a page: a client never stalls on an empty page that says more follow."""
    monkeypatch.setattr(routes_sessions, "PAGE_BYTES", 1000)
    store = FileStore(tmp_path / "sessions")
    await store.create_session("s")
    await store.append_entries("s", [msg(f"e{i}", "y" * 2000) for i in range(1, 4)])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        pages = []
        for after in range(3):
            body = (await client.get("/v1/sessions/s/entries", params={"after": after})).json()
            pages.append(([e["seq"] for e in body["entries"]], body["more"]))
        assert pages == [([1], True), ([2], True), ([3], False)]


class CountingStore(FileStore):
    """A FileStore that counts the entries its seq reads hand the server, and the most one
    read handed it."""

    read = largest = 0

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        found = await super().load_entries_after(session_id, after, limit)
        self.read += len(found)
        self.largest = max(self.largest, len(found))
        return found


async def test_a_page_reads_the_page_not_the_session(tmp_path: Path) -> None:
    """A page of 2 from a session of 500 entries reads 3 of them from the store (the third
    says ``more``), not the whole session: entries may be megabytes each."""
    store = CountingStore(tmp_path / "sessions")
    await store.create_session("s")
    await store.append_entries("s", [msg(f"e{i}") for i in range(1, 501)])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        first = await client.get("/v1/sessions/s/entries", params={"after": 0, "limit": 2})
        assert first.status_code == 200, first.text
        assert [e["seq"] for e in first.json()["entries"]] == [1, 2] and first.json()["more"]
        assert store.read == 3
        last = await client.get("/v1/sessions/s/entries", params={"after": 498, "limit": 2})
        assert [e["seq"] for e in last.json()["entries"]] == [499, 500]
        assert last.json()["more"] is False and store.read == 5


async def test_a_stream_replays_a_long_session_a_page_at_a_time(tmp_path: Path) -> None:
    """A stream that resumes at the start of a session of 500 entries (or a little after it)
    sends every entry after its cursor once, in seq order, and reads them from the store a
    page at a time: the replay never holds the whole session in the server's memory."""
    store = CountingStore(tmp_path / "sessions")
    await store.create_session("s")
    await store.append_entries("s", [msg(f"e{i}") for i in range(1, 501)])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        for cursor, after, last in ((0, 0, None), (7, None, 7)):
            store.largest = 0
            async with stream(client, "s", after=after, last_event_id=last) as reader:
                await reader.until(lambda r: r.live)
            assert [seq for seq, _ in reader.entries()] == list(range(cursor + 1, 501))
            assert [e["id"] for _, e in reader.entries()][-1] == "e500"
            assert store.largest <= 101, store.largest


class WholeReads(FileStore):
    """A FileStore that counts the entries its reads hand the server: loads, seq reads and
    last-entry reads."""

    read = 0

    async def load_entries(self, session_id: str) -> list[Entry]:
        found = await super().load_entries(session_id)
        self.read += len(found)
        return found

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        found = await super().load_entries_after(session_id, after, limit)
        self.read += len(found)
        return found

    async def last_entry(self, session_id: str) -> tuple[int, Entry] | None:
        last = await super().last_entry(session_id)
        self.read += last is not None
        return last


async def test_a_session_and_a_stream_from_now_read_the_last_entry_only(tmp_path: Path) -> None:
    """``GET /v1/sessions/{id}`` (and opening it again with ``POST /v1/sessions``) answers
    the seq and ID of the session's last entry, and a stream without a cursor starts after it:
    neither reads the 500 entries before it (tool results may be megabytes each)."""
    store = WholeReads(tmp_path / "sessions")
    await store.create_session("s")
    await store.append_entries("s", [msg(f"e{i}") for i in range(1, 501)])
    async with serving(create_app(store=store)) as url, httpx.AsyncClient(base_url=url) as client:
        got = await client.get("/v1/sessions/s")
        assert got.status_code == 200, got.text
        assert (got.json()["last_seq"], got.json()["leaf_id"]) == (500, "e500")
        assert store.read <= 1, store.read
        store.read = 0
        opened = await client.post("/v1/sessions", json={"session_id": "s"})
        assert opened.status_code == 200, opened.text
        assert (opened.json()["last_seq"], opened.json()["leaf_id"]) == (500, "e500")
        assert store.read <= 1, store.read
        store.read = 0
        async with stream(client, "s") as reader:
            await reader.until(lambda r: r.live)
            assert store.read <= 2, store.read  # and the entry a new hub starts from
            await store.append_entries("s", [msg("e501")])
            await reader.until(lambda r: r.last_seq() == 501)
        assert [seq for seq, _ in reader.entries()] == [501]
