"""What a client is told while the store is down: a 503 that says what to do and names nothing
of the server (no path, no host), its detail kept in the server's log, one line, no traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pymongo import AsyncMongoClient

from durable_agent.ai import user_message
from durable_agent.server import create_app
from durable_agent.session import Entry, MessageEntry, Store
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import free_port, scripted, serving, tool_script
from tests.server.test_tenants_and_errors import ROUTES
from tests.support.disk import SwitchedDisk

SID = "s1"
EVERY = [*ROUTES, ("GET", "/v1/sessions", None), ("POST", "/v1/sessions", {"session_id": "s2"})]


def _mongo_nobody_answers() -> tuple[Store, str]:
    """A MongoStore on a port nothing listens on (a MongoDB down), and its address."""
    from durable_agent.stores.mongo import MongoStore

    address = f"127.0.0.1:{free_port()}"
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        f"mongodb://{address}", serverSelectionTimeoutMS=200
    )
    return MongoStore(client["nobody"]), address


async def _answers(app: FastAPI) -> list[tuple[str, str, httpx.Response]]:
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        out = []
        for method, path, body in EVERY:
            r = await client.request(method, path.format(id=SID), json=body)
            out.append((method, path, r))
        return out


def _check(answers: list[tuple[str, str, httpx.Response]], secret: str) -> None:
    for method, path, r in answers:
        assert r.status_code == 503, (method, path, r.text)
        error = r.json()["error"]
        assert error["type"] == "StoreUnavailableError", (method, path, r.text)
        assert secret not in r.text, (method, path, r.text)
        assert "session store is unavailable" in error["message"], (method, path, r.text)


async def test_a_file_store_down_answers_503_without_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    root = tmp_path / "private-root"
    store = FileStore(root)
    await store.create_session(SID)
    root.rename(tmp_path / "moved")
    root.write_text("not a directory")  # every read and write of the store fails: a disk gone
    app = create_app(store=store, agents={"a": AgentSpec(model=scripted(tool_script()))})
    _check(await _answers(app), "private-root")
    said = [r for r in caplog.records if "private-root" in r.getMessage()]
    assert said, "the server's log keeps the detail"
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in said)


async def test_a_mongo_store_down_answers_503_without_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    store, address = _mongo_nobody_answers()
    app = create_app(store=store, agents={"a": AgentSpec(model=scripted(tool_script()))})
    _check(await _answers(app), address)
    said = [r for r in caplog.records if address in r.getMessage()]
    assert said, "the server's log keeps the detail"
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in said)


class OutageAt(SwitchedDisk):
    """A FileStore whose disk goes just before its ``at``-th read after a seq: a store that
    fails between a stream's route and its first frames."""

    def __init__(self, root: Path, at: int) -> None:
        super().__init__(root)
        self.at, self.reads = at, 0

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        self.reads += 1
        if self.reads == self.at:
            self.down()
        return await super().load_entries_after(session_id, after, limit)


async def test_a_store_down_as_a_stream_starts_ends_it_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    root = tmp_path / "private-root"
    store = OutageAt(root, at=2)  # the route's read works, the stream's first fails
    await store.create_session(SID)
    await store.append_entries(SID, [MessageEntry(id="q", message=user_message("hello"))])
    app = create_app(store=store, agents={"a": AgentSpec(model=scripted(tool_script()))})
    async with (
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
        client.stream("GET", f"/v1/sessions/{SID}/stream?after=1") as r,
    ):
        assert r.status_code == 200
        body = (await r.aread()).decode()
    assert "private-root" not in body
    said = [r for r in caplog.records if "private-root" in r.getMessage()]
    assert said, "the server's log keeps the detail"
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in said), caplog.text
    assert "Traceback" not in caplog.text
