"""People reach a run over HTTP: decisions on the calls that wait for them, and messages into
the running run, in process and on Temporal (a decision through any server process)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent import ApprovalDecision, ApprovalRequest, Entry, MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.durable.inputs import text
from durable_agent.durable.limits import PAYLOAD_LIMIT
from durable_agent.server import create_app
from durable_agent.server.temporal_runs import TemporalRuns
from durable_agent.session.codec import encode_entry, entry_to_wire
from durable_agent.session.tree import path
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, scripted, serving, stream
from tests.support.gated_store import GatedStore
from tests.support.polling import eventually
from tests.support.temporal import FAST, running_worker

KEYS = {
    "key-acme": {"principal": "ann", "prefix": "acme:"},
    "key-bolt": {"principal": "bob", "prefix": "bolt:"},
}
ACME = {"Authorization": "Bearer key-acme"}
BOLT = {"Authorization": "Bearer key-bolt"}
SID = "acme:mail"


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


def _script() -> list[Reply]:
    calls = [
        ToolCall(id="call-1", name="send_email", arguments={"to": "bob@example.com"}),
        ToolCall(id="call-2", name="send_email", arguments={"to": "board@example.com"}),
    ]
    return [
        Reply(tool_calls=calls),
        Reply(text="Sent one, the other was refused."),
        Reply(text="Told you so."),
    ]


def _spec() -> AgentSpec:
    return AgentSpec(model=scripted(_script()), tools=[send_email])


def _status(reader: Reader, run_id: str) -> str:
    said = [f.data for f in reader.frames if f.event == "run"]
    mine = [d["status"] for d in said if d["run_id"] == run_id]
    return mine[-1] if mine else ""


ONE_SENT_ONE_DENIED = [
    ("tool_result", "sent to bob@example.com"),
    ("tool_result", "tool call denied"),
    ("assistant", "Sent one, the other was refused."),
]
"""How the turn of :func:`_script` ends once one mail is approved and the other denied."""


async def said_on_path(store: FileStore, sid: str) -> list[tuple[str, str]]:
    """The messages on the session's active path (to its newest entry): role and text."""
    stored = await store.load_entries(sid)
    on_path = path(stored, stored[-1].id)
    return [(e.message.role, e.message.text()) for e in on_path if isinstance(e, MessageEntry)]


def _requests(reader: Reader) -> list[dict[str, Any]]:
    return [e for _, e in reader.entries() if e.get("kind") == "approval_request"]


async def _scenario(asker: httpx.AsyncClient, decider: httpx.AsyncClient, store: FileStore) -> None:
    """A run asks for two calls; a message arrives while it waits; one call is approved (by
    ``decider``, maybe another server process), the other denied with a reason."""
    made = await asker.post("/v1/sessions", json={"session_id": SID}, headers=ACME)
    assert made.status_code == 201
    async with stream(asker, SID, after=0, headers=ACME) as reader:
        started = await asker.post(
            f"/v1/sessions/{SID}/runs", json={"text": "Mail them"}, headers=ACME
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        await reader.until(lambda r: len(_requests(r)) == 2, within=60)
        await reader.until(lambda r: _status(r, run_id) == "awaiting_approval")

        listed = await decider.get(f"/v1/sessions/{SID}/approvals", headers=ACME)
        pending = listed.json()["pending"]
        assert [(p["tool_call_id"], p["tool_name"], p["run_id"]) for p in pending] == [
            ("call-1", "send_email", run_id),
            ("call-2", "send_email", run_id),
        ]
        foreign = await decider.get(f"/v1/sessions/{SID}/approvals", headers=BOLT)
        assert foreign.status_code == 404
        assert foreign.json()["error"]["type"] == "SessionNotFoundError"

        sent = await decider.post(
            f"/v1/sessions/{SID}/messages", json={"text": "Also cc Carol."}, headers=ACME
        )
        assert sent.status_code == 202, sent.text
        assert sent.json()["message_id"] and sent.json()["run_id"] == run_id
        follow = {"text": "Then tell me.", "on_busy": "at_end"}
        queued = await decider.post(f"/v1/sessions/{SID}/runs", json=follow, headers=ACME)
        assert queued.status_code == 202, queued.text
        assert queued.json()["run_id"] == run_id and queued.json()["message_id"]

        refused = await decider.post(
            f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}, headers=BOLT
        )
        assert refused.status_code == 404
        approved = await decider.post(
            f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}, headers=ACME
        )
        assert approved.status_code == 200, approved.text
        decision = approved.json()
        assert decision["kind"] == "approval_decision"
        assert decision["decided_by"] == "ann" and decision["approved"] is True

        again = await decider.post(
            f"/v1/sessions/{SID}/approvals/call-1", json={"approved": False}, headers=ACME
        )
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "ApprovalNotPendingError"
        assert again.json()["error"]["decision_id"] == decision["id"]

        with_args = await decider.post(  # a denied call does not run: args are refused
            f"/v1/sessions/{SID}/approvals/call-2",
            json={"approved": False, "args": {"to": "eve@example.com"}},
            headers=ACME,
        )
        assert with_args.status_code == 422, with_args.text
        assert "args: a denied call does not run" in with_args.json()["error"]["message"]
        denied = await decider.post(
            f"/v1/sessions/{SID}/approvals/call-2",
            json={"approved": False, "reason": "not before the audit"},
            headers=ACME,
        )
        assert denied.status_code == 200, denied.text
        await reader.until(ended(run_id), within=60)
        total = len(await store.load_entries(SID))
        await reader.until(lambda r: r.last_seq() == total)
        statuses = [f.data["status"] for f in reader.frames if f.event == "run"]
        assert statuses[-3:] == ["awaiting_approval", "started", "completed"], statuses

    stored = await store.load_entries(SID)
    assert [e for _, e in reader.entries()] == [entry_to_wire(e) for e in stored]
    decisions = [e for e in stored if isinstance(e, ApprovalDecision)]
    assert [(d.tool_call_id, d.approved, d.reason, d.decided_by) for d in decisions] == [
        ("call-1", True, None, "ann"),
        ("call-2", False, "not before the audit", "ann"),
    ]
    messages = [e.message for e in stored if isinstance(e, MessageEntry)]
    said = [(m.role, m.text()) for m in messages]
    assert said[-6:] == [
        ("tool_result", "sent to bob@example.com"),
        ("tool_result", "tool call denied: not before the audit"),
        ("user", "Also cc Carol."),
        ("assistant", "Sent one, the other was refused."),
        ("user", "Then tell me."),
        ("assistant", "Told you so."),
    ]
    late = await decider.post(f"/v1/sessions/{SID}/messages", json={"text": "hi"}, headers=ACME)
    assert late.status_code == 409
    assert late.json()["error"]["type"] == "RunNotAcceptingError"
    unknown = await decider.post(
        f"/v1/sessions/{SID}/approvals/call-9", json={"approved": True}, headers=ACME
    )
    assert unknown.status_code == 409
    assert unknown.json()["error"]["type"] == "ApprovalNotPendingError"
    assert len(await store.load_entries(SID)) == len(stored), "a refusal stores nothing"


async def test_approve_deny_and_a_message_in_process(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"mail": _spec()}, keys=KEYS)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await _scenario(client, client, store)


@pytest.mark.temporal
async def test_approve_deny_and_a_message_through_another_server(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Server A starts and streams the run; server B, sharing nothing with A but the store and
    Temporal, decides its calls and sends it the message."""
    store = FileStore(tmp_path / "sessions")
    queue = f"test-{uuid.uuid4().hex[:12]}"
    apps = []
    for _ in range(2):
        app = create_app(
            store=store, temporal=temporal_client, task_queue=queue, agents=["mail"], keys=KEYS
        )
        runs = app.state.server.runs
        assert isinstance(runs, TemporalRuns)
        runs.executor.timeouts = FAST
        apps.append(app)
    async with (
        running_worker(temporal_client, store, {"mail": _spec()}, task_queue=queue),
        serving(apps[0]) as url_a,
        serving(apps[1]) as url_b,
        httpx.AsyncClient(base_url=url_a) as a,
        httpx.AsyncClient(base_url=url_b) as b,
    ):
        await _scenario(a, b, store)


async def test_a_parked_run_continues_once_its_calls_are_decided(tmp_path: Path) -> None:
    """The run stops waiting (``approval_wait``) and ends; the decisions wait in the store, and
    the one that settles the turn starts the run that carries the calls out."""
    store = FileStore(tmp_path / "sessions")
    spec = AgentSpec(model=scripted(_script()), tools=[send_email], approval_wait=0.05)
    app = create_app(store=store, agents={"mail": spec}, keys=KEYS)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await client.post("/v1/sessions", json={"session_id": SID}, headers=ACME)
        async with stream(client, SID, after=0, headers=ACME) as reader:
            started = await client.post(
                f"/v1/sessions/{SID}/runs", json={"text": "Mail them"}, headers=ACME
            )
            first = started.json()["run_id"]
            await reader.until(ended(first))
            assert (await client.get(f"/v1/sessions/{SID}/runs", headers=ACME)).json() == {
                "active": []
            }
            one = await client.post(
                f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}, headers=ACME
            )
            assert one.status_code == 200, one.text
            assert (await client.get(f"/v1/sessions/{SID}/runs", headers=ACME)).json() == {
                "active": []
            }, "one call still waits: nothing runs"
            two = await client.post(
                f"/v1/sessions/{SID}/approvals/call-2", json={"approved": False}, headers=ACME
            )
            assert two.status_code == 200, two.text

            def runs(r: Reader) -> set[str]:
                return {f.data["run_id"] for f in r.frames if f.event == "run"} - {first}

            # the decision that settled the turn started a run
            await reader.until(runs)
            (second,) = runs(reader)
            await reader.until(ended(second))
        assert (await said_on_path(store, SID))[-3:] == ONE_SENT_ONE_DENIED


async def test_a_decision_as_the_run_parks_starts_the_run_that_carries_it_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, the decision that settles the turn reaches the run's handle just as the run
    parks (its loop closing, a provider's connection shut): it is stored at the leaf, and the
    run that carries the calls out starts, as for a decision after the park. Before, nothing
    started: the turn waited, decided, for the next run."""
    from durable_agent.agent.loop import ModelLoop
    from durable_agent.durable.state import SessionState

    closing, close, waits = asyncio.Event(), asyncio.Event(), asyncio.Event()
    closes, run_ended = ModelLoop.aclose, SessionState.run_ended

    async def closes_slowly(loop: ModelLoop) -> None:
        if not close.is_set():
            closing.set()
            await close.wait()
        await closes(loop)

    async def waited(state: SessionState) -> None:
        waits.set()  # the decision waits for the parked run's end
        await run_ended(state)

    monkeypatch.setattr(ModelLoop, "aclose", closes_slowly)
    monkeypatch.setattr(SessionState, "run_ended", waited)
    store = FileStore(tmp_path / "sessions")
    one = [ToolCall(id="call-1", name="send_email", arguments={"to": "bob@example.com"})]
    script = [Reply(tool_calls=one), Reply(text="Sent.")]
    spec = AgentSpec(model=scripted(script), tools=[send_email], approval_wait=0.05)
    app = create_app(store=store, agents={"mail": spec}, keys=KEYS)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail"}, headers=ACME)
        assert started.status_code == 202, started.text
        await asyncio.wait_for(closing.wait(), 30)
        deciding = asyncio.ensure_future(
            client.post(
                f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}, headers=ACME
            )
        )
        await asyncio.wait_for(waits.wait(), 30)
        close.set()
        assert (await asyncio.wait_for(deciding, 30)).status_code == 200

        async def carried_out() -> bool:
            return (await said_on_path(store, SID))[-2:] == [
                ("tool_result", "sent to bob@example.com"),
                ("assistant", "Sent."),
            ]

        await eventually(carried_out, within=30, what="the continuation run")


async def test_a_reason_over_the_payload_limit_is_refused(
    temporal: Client | None, tmp_path: Path
) -> None:
    """A denial whose reason would make its entries (the decision, and the call's answer that
    quotes it) larger than the payload limit is refused, 413 ``PayloadTooLargeError`` with
    nothing stored, as an oversized message is; the run waits on, and takes a decision that
    fits (on Temporal such an entry would fail the run as it stores it)."""
    async with helper_like(temporal, FileStore(tmp_path / "sessions")) as app:
        await _huge_reason(app)


async def _huge_reason(app: Any) -> None:
    async with serving(app) as url, httpx.AsyncClient(base_url=url, headers=ACME) as client:
        await client.post("/v1/sessions", json={"session_id": SID})
        async with stream(client, SID, after=0) as reader:
            started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail"})
            run_id = started.json()["run_id"]
            await reader.until(lambda r: _status(r, run_id) == "awaiting_approval", 60)
            for size in (PAYLOAD_LIMIT - 60, PAYLOAD_LIMIT - 300):
                huge = {"approved": False, "reason": "x" * size}
                r = await client.post(f"/v1/sessions/{SID}/approvals/call-1", json=huge)
                assert r.status_code == 413, (size, r.text[:300])
                assert r.json()["error"]["type"] == "PayloadTooLargeError"
            pending = (await client.get(f"/v1/sessions/{SID}/approvals")).json()["pending"]
            assert [p["tool_call_id"] for p in pending] == ["call-1", "call-2"]
            # a message whose entry fits the limit only without the header it is stored with
            r = await client.post(f"/v1/sessions/{SID}/messages", json={"text": _near_limit()})
            assert r.status_code == 413, r.text[:300]
            assert r.json()["error"]["type"] == "PayloadTooLargeError"
            for call in ("call-1", "call-2"):
                body = {"approved": False, "reason": "no"}
                r = await client.post(f"/v1/sessions/{SID}/approvals/{call}", json=body)
                assert r.status_code == 200, r.text[:300]
            await reader.until(ended(run_id), 60)
            assert _status(reader, run_id) == "completed"


def _near_limit() -> str:
    """Text whose message entry, unstamped, is just under the payload limit."""
    overhead = len(encode_entry(text("x")).encode()) - 1
    return "x" * (PAYLOAD_LIMIT - overhead - 5)


@asynccontextmanager
async def helper_like(temporal: Client | None, store: FileStore) -> AsyncIterator[Any]:
    """The mail agent in process, or on a worker of this test (``temporal``)."""
    if temporal is None:
        yield create_app(store=store, agents={"mail": _spec()}, keys=KEYS)
        return
    queue = f"test-{uuid.uuid4().hex[:12]}"
    app = create_app(store=store, temporal=temporal, task_queue=queue, agents=["mail"], keys=KEYS)
    runs = app.state.server.runs
    assert isinstance(runs, TemporalRuns)
    runs.executor.timeouts = FAST
    async with running_worker(temporal, store, {"mail": _spec()}, task_queue=queue):
        yield app


def _asks(call_id: str) -> Any:
    """A batch holding the approval request of ``call_id``."""

    def match(entries: Sequence[Entry]) -> bool:
        return any(isinstance(e, ApprovalRequest) and e.tool_call_id == call_id for e in entries)

    return match


def _queued(app: Any, call_id: str) -> Callable[[], Awaitable[bool]]:
    """Whether the session's live run holds a decision on ``call_id`` (the server's runner's
    handle: the one the decision must reach)."""

    async def probe() -> bool:
        handles = app.state.server.runs._handles.values()
        engines = [h._state.live_run for h in handles if h._state.live_run is not None]
        return any(e.inbox.deciding(call_id) for e in engines)

    return probe


async def test_a_decision_before_the_run_applied_its_requests_reaches_the_run(
    tmp_path: Path,
) -> None:
    """In process: the run's requests are in the store (the approvals route and a client see
    them pending) while the run's own write has not returned. A decision then reaches the live
    run, which takes it once it waits; it was committed beside the run by a handle of its own,
    and the run waited for it until ``approval_wait`` (an hour) and parked."""
    store = GatedStore(FileStore(tmp_path / "sessions"))
    app = create_app(store=store, agents={"mail": _spec()}, keys=KEYS)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, headers=ACME) as client:
        await client.post("/v1/sessions", json={"session_id": SID})
        store.arm(_asks("call-1"))
        async with stream(client, SID, after=0) as reader:
            started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail"})
            run_id = started.json()["run_id"]
            try:
                await asyncio.wait_for(store.entered.wait(), 30)
                pending = (await client.get(f"/v1/sessions/{SID}/approvals")).json()["pending"]
                assert [p["tool_call_id"] for p in pending] == ["call-1", "call-2"]
                body = {"approved": True}
                one = asyncio.ensure_future(
                    client.post(f"/v1/sessions/{SID}/approvals/call-1", json=body)
                )
                await eventually(_queued(app, "call-1"), what="the run holds the decision")
                nope = await client.post(f"/v1/sessions/{SID}/approvals/call-9", json=body)
                assert nope.status_code == 409, nope.text
                assert nope.json()["error"]["type"] == "ApprovalNotPendingError"
            finally:
                store.release.set()
            decided = await asyncio.wait_for(one, 30)
            assert decided.status_code == 200, decided.text
            denied = {"approved": False, "reason": "no"}
            two = await client.post(f"/v1/sessions/{SID}/approvals/call-2", json=denied)
            assert two.status_code == 200, two.text
            await reader.until(ended(run_id), within=30)
            assert _status(reader, run_id) == "completed"
    stored = await store.load_entries(SID)
    decisions = [e for e in stored if isinstance(e, ApprovalDecision)]
    assert [(d.tool_call_id, d.approved) for d in decisions] == [
        ("call-1", True),
        ("call-2", False),
    ]
    assert decisions[0].id == decided.json()["id"]
    said = [e.message.text() for e in stored if isinstance(e, MessageEntry)]
    assert said[-3:] == ["sent to bob@example.com", "tool call denied: no", _script()[1].text]
