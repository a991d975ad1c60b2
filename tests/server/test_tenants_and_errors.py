"""Every route refuses what it must with a typed 4xx, and stores nothing for it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_agent.durable import UnknownAgentError
from durable_agent.server import create_app
from durable_agent.server.runs import pick_agent
from durable_agent.server.tenants import Tenant, Tenants, load_keys
from durable_agent.session import SessionRecord
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec
from tests.server.support import scripted, serving, tool_script

KEYS = {
    "key-acme": {"principal": "ann", "prefix": "acme:"},
    "key-bolt": {"principal": "bob", "prefix": "bolt:"},
}
ACME = {"Authorization": "Bearer key-acme"}
BOLT = {"Authorization": "Bearer key-bolt"}

ROUTES = [
    ("GET", "/v1/sessions/{id}", None),
    ("GET", "/v1/sessions/{id}/entries", None),
    ("DELETE", "/v1/sessions/{id}", None),
    ("POST", "/v1/sessions/{id}/runs", {"text": "hi"}),
    ("POST", "/v1/sessions/{id}/runs/r1/cancel", None),
    ("GET", "/v1/sessions/{id}/runs/r1", None),
    ("GET", "/v1/sessions/{id}/runs", None),
    ("POST", "/v1/sessions/{id}/branch", {"entry_id": ""}),
    ("POST", "/v1/sessions/{id}/fork", {}),
    ("POST", "/v1/sessions/{id}/compact", {"keep_turns": 0}),
    ("GET", "/v1/sessions/{id}/stream", None),
    ("POST", "/v1/sessions/{id}/messages", {"text": "hi"}),
    ("GET", "/v1/sessions/{id}/approvals", None),
    ("POST", "/v1/sessions/{id}/approvals/c1", {"approved": True}),
]


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(KEYS))
    return path


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*")) if root.exists() else []


async def test_tenants_see_only_their_own_sessions(
    tmp_path: Path, keys_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted(tool_script()))
    app = create_app(store=store, agents={"a": spec}, keys=keys_file)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        made = await client.post("/v1/sessions", json={}, headers=ACME)
        assert made.status_code == 201
        mine = made.json()["session_id"]
        assert mine.startswith("acme:") and len(mine) == len("acme:") + 16
        await client.post("/v1/sessions", json={"session_id": "bolt:x"}, headers=BOLT)
        listed = await client.get("/v1/sessions", headers=ACME)
        assert [s["session_id"] for s in listed.json()["sessions"]] == [mine]
        before = _files(tmp_path / "sessions")
        for number, (method, path, body) in enumerate(ROUTES):
            for headers, status in [({}, 401), ({"Authorization": "Bearer nope"}, 401)]:
                r = await client.request(method, path.format(id=mine), json=body, headers=headers)
                assert r.status_code == status, (method, path, r.text)
                assert r.json()["error"]["type"] == "UnauthorizedError"
            # another tenant's session and a missing one answer alike
            foreign = await client.request(
                method, path.format(id="bolt:x"), json=body, headers=ACME
            )
            missing = await client.request(
                method, path.format(id=f"acme:no{number}"), json=body, headers=ACME
            )
            assert foreign.status_code == 404, (method, path, foreign.text)
            assert foreign.json()["error"]["type"] == "SessionNotFoundError"
            if method != "POST" or not path.endswith("/runs"):  # a run creates its session
                assert missing.status_code == 404, (method, path, missing.text)
        refused = await client.post("/v1/sessions", json={"session_id": "bolt:y"}, headers=ACME)
        assert refused.status_code == 404
        fork = await client.post(
            f"/v1/sessions/{mine}/fork", json={"child_id": "bolt:z"}, headers=ACME
        )
        assert fork.status_code == 404
        after = _files(tmp_path / "sessions")
        assert [f for f in after if f not in before] == ["acme:no3.jsonl"]  # the run's
        assert "bolt:y.jsonl" not in after and "bolt:z.jsonl" not in after
    assert "key-acme" not in caplog.text and "key-bolt" not in caplog.text


class CountingStore(MemoryStore):
    """A memory store that counts its listings and the records they return."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.read = 0, 0

    async def list_sessions(self, **page: Any) -> list[SessionRecord]:
        records = await super().list_sessions(**page)
        self.calls, self.read = self.calls + 1, self.read + len(records)
        return records


async def test_a_tenant_lists_its_own_sessions_without_reading_the_others() -> None:
    """A page of a tenant's listing is one store call reading its own records (and one more,
    for ``more``): its cost, and its latency, say nothing of how many sessions others have."""
    store = CountingStore()
    mine = [(await store.create_session(f"acme:{n}")).id for n in range(3)]
    for n in range(250):
        await store.create_session(f"bolt:{n}")
    app = create_app(store=store, keys=KEYS)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        pages = []
        for offset in (0, 2):
            page = await client.get(
                "/v1/sessions", params={"limit": 2, "offset": offset}, headers=ACME
            )
            assert page.status_code == 200, page.text
            pages.append(page.json())
        assert (store.calls, store.read) == (2, 3 + 1)
        listed = [s["session_id"] for page in pages for s in page["sessions"]]
        assert sorted(listed) == mine and len(listed) == 3
        assert [page["more"] for page in pages] == [True, False]
        others = await client.get("/v1/sessions", params={"limit": 1000}, headers=BOLT)
        assert len(others.json()["sessions"]) == 250 and not others.json()["more"]


BAD_IDS = ["..", "a/../../etc", "%2e%2e", "a b", "x" * 201, '{"$ne":null}', "$where"]


async def test_bad_ids_bodies_and_json_are_refused_and_store_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"a": AgentSpec(model=scripted(tool_script()))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for bad in BAD_IDS:
            for method, path, body in ROUTES:
                r = await client.request(method, path.format(id=bad), json=body)
                # a dot segment is resolved by the client: the path then names no session route
                assert r.status_code in (400, 404, 405), (bad, method, path, r.status_code)
                if r.status_code == 400:
                    assert r.json()["error"]["type"] == "InvalidSessionIdError"
            r = await client.post("/v1/sessions", json={"session_id": bad})
            assert r.status_code == 400 and r.json()["error"]["type"] == "InvalidSessionIdError"
            r = await client.post("/v1/sessions", json={"session_id": {"$ne": None}})
            assert r.status_code == 422
        r = await client.post(
            "/v1/sessions/ok/runs",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "MalformedJSONError"
        r = await client.post("/v1/sessions/ok/runs", json={"text": "x" * 2_000_000})
        assert r.status_code == 413 and r.json()["error"]["type"] == "PayloadTooLargeError"
        r = await client.post("/v1/sessions/ok/runs", json={"text": "hi", "on_busy": "maybe"})
        assert r.status_code == 422
        r = await client.post("/v1/sessions/ok/runs", json={"text": "hi", "agent": "nobody"})
        assert r.status_code == 422 and r.json()["error"]["type"] == "UnknownAgentError"
        r = await client.get("/v1/sessions/ok/entries", params={"after": "-1"})
        assert r.status_code == 422
        for seq in ("zz", "-1", "²", "1.5", "9" * 19):
            header = {b"Last-Event-ID": seq.encode("latin-1")}  # a header is latin-1
            r = await client.get("/v1/sessions/ok/stream", headers=header)
            assert r.status_code == 400, (seq, r.text)
            assert r.json()["error"]["type"] == "InvalidLastEventIdError"
    assert _files(tmp_path / "sessions") == []


LOOSE = [
    ("approvals/c1", {"approved": "yes"}),
    ("approvals/c1", {"approved": 1}),
    ("approvals/c1", {"approved": "false"}),
    ("approvals/c1", {"approved": None}),
    ("messages", {"text": "hi", "message_id": 7}),
    ("runs", {"text": 42}),
    ("runs", {"text": "hi", "run_id": 12345}),
    ("fork", {"child_id": 9}),
    ("compact", {"keep_turns": "1"}),
]


@pytest.mark.parametrize(("route", "body"), LOOSE, ids=[f"{r}:{b}" for r, b in LOOSE])
async def test_a_body_field_of_the_wrong_json_type_is_refused_not_coerced(
    tmp_path: Path, route: str, body: dict[str, object]
) -> None:
    """A decision above all: ``"approved": "yes"`` is not a yes, and ``"false"`` no no."""
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"a": AgentSpec(model=scripted(tool_script()))})
    await store.create_session("s")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        r = await client.post(f"/v1/sessions/s/{route}", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["type"] == "ValidationError"
    assert await store.load_entries("s") == []
    assert _files(tmp_path / "sessions") == ["s.jsonl"]


async def test_without_agents_or_temporal_runs_answer_503(tmp_path: Path) -> None:
    app = create_app(store=FileStore(tmp_path / "s"))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        r = await client.post("/v1/sessions/a/runs", json={"text": "hi"})
        assert r.status_code == 503 and r.json()["error"]["type"] == "RunsUnavailableError"
        assert (await client.post("/v1/sessions", json={"session_id": "a"})).status_code == 201
        assert (await client.post("/v1/sessions", json={"session_id": "a"})).status_code == 200
        page = await client.get("/")
        assert page.status_code == 200 and "<html" in page.text.lower()


def test_a_run_that_names_no_agent_is_told_how_to() -> None:
    """A server started without a default agent (``serve`` without ``--agent``) says how to
    name one; one with several lists them; a named agent on Temporal is the workers' to know."""
    with pytest.raises(UnknownAgentError, match=r'"agent".*--agent NAME'):
        pick_agent([], None)
    with pytest.raises(UnknownAgentError, match="this server has a, b"):
        pick_agent(["a", "b"], None)
    with pytest.raises(UnknownAgentError, match=r"no agent 'c' on this server \(it runs a, b\)"):
        pick_agent(["a", "b"], "c")  # serve --agent NAME runs that one only, whatever the workers
    assert (pick_agent(["a"], None), pick_agent([], "zzz")) == ("a", "zzz")


@pytest.mark.parametrize(
    ("authorization", "known"),
    [
        ("Bearer key-acme", True),
        ("bearer key-acme", True),  # the scheme's name is case-insensitive
        ("BEARER   key-acme ", True),
        ("Basic key-acme", False),
        ("Bearerkey-acme", False),
        ("Bearer key-acm", False),
        ("key-acme", False),
        ("", False),
        (None, False),
    ],
)
def test_a_key_is_known_by_its_bearer_credentials_alone(
    authorization: str | None, known: bool
) -> None:
    acme = Tenant(principal="ann", prefix="acme:")
    caller = Tenants({"key-acme": acme}).caller(authorization)
    assert caller == (acme if known else None)


@pytest.mark.parametrize("key", ["key-acme ", " key-acme", "key acme", "key-acme\n"])
def test_a_key_no_bearer_header_can_carry_is_refused_when_loaded(key: str) -> None:
    """A key with white space (a copy-paste's trailing newline, say) could never match: the
    server strips the credential it gets and a bearer token holds no space. Refused at load,
    naming the key's number, never the key."""
    with pytest.raises(ValueError, match="key number 2 has white space") as raised:
        load_keys({"key-bolt": KEYS["key-bolt"], key: KEYS["key-acme"]})
    assert "acme" not in str(raised.value)


def test_a_prefix_that_covers_another_tenants_is_said_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``acme`` owns every ID starting with it, ``acme2:x`` too: a prefix written without its
    separator gives one tenant another's sessions, without a word. Loading the keys says so
    (a warning naming the principals, never a key); nested prefixes may be meant (an operator
    over a team), so they load. A key for everything (no prefix) is said by what it is."""
    keys = {
        "key-ann": {"principal": "ann", "prefix": "acme"},
        "key-bob": {"principal": "bob", "prefix": "acme2:"},
        "key-cy": {"principal": "cy", "prefix": "acme2:"},
        "key-dee": {"principal": "dee", "prefix": "bolt:"},
    }
    with caplog.at_level(logging.WARNING, logger="durable_agent.server"):
        table = load_keys(keys)
    assert table is not None and table["key-ann"].owns("acme2:x")
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "the prefix 'acme' of ann covers 'acme2:' of bob, cy: ann can read and run their "
        "sessions (end a prefix with a separator, e.g. 'acme:')"
    ], said
    assert not any("key-" in line for line in said)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="durable_agent.server"):
        load_keys(
            {
                "key-ann": {"principal": "ann", "prefix": "acme:"},
                **{"key-ops": {"principal": "ops"}},
            }
        )
    assert caplog.records == [], "no prefix: every session, as written"
