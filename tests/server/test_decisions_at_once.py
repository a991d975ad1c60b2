"""Two decisions on one parked turn at once (a front-end's "approve all"): no run takes them, so
each request commits its decision at the session's leaf; they must land one after the other on
the active path, not as siblings of one leaf (a fork whose newest path holds one decision). The
run that then carries the two calls out stores both results on that path, in call order, and
the model is shown both."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from durable_agent import ApprovalDecision, Entry, MessageEntry, ScriptedModel
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.session.tree import path
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import Reader, ended, helper_app, replica, scripted, serving, stream
from tests.support.polling import eventually

SID = "inbox"
SENT_TO = ((1, "bob"), (2, "eve"))
SENT: list[str] = []
"""Each mail ``send`` sent (a Temporal worker runs in this process too)."""


@tool(approval=True)
async def send(to: str) -> str:
    """Send a mail (a person approves each one)."""
    SENT.append(to)
    return f"sent to {to}"


def _spec() -> AgentSpec:
    """Asks for two mails in one turn, and stops waiting at once (the run parks)."""
    calls = [ToolCall(id=f"call-{i}", name="send", arguments={"to": to}) for i, to in SENT_TO]
    replies = [Reply(tool_calls=calls), Reply(text="Both sent.")]
    return AgentSpec(model=scripted(replies), tools=[send], approval_wait=0.05)


def _waits_on_lock(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is suspended acquiring an ``asyncio.Lock`` (its awaits, outermost in)."""
    coro: Any = task.get_coro()
    while coro is not None:
        if getattr(coro, "cr_code", None) is asyncio.Lock.acquire.__code__:
            return True
        coro = getattr(coro, "cr_await", None)
    return False


class AtOnce:
    """Holds each decision request just after its first read of the session, until the other
    request read it too, or waits on a lock (something makes it wait for this one): with
    nothing serialising them, both decide at the leaf they read, neither seeing the other's
    decision. No sleeps: a poll of the other request's state, bounded."""

    def __init__(self, runs: Any, store: FileStore) -> None:
        self.deciders: list[asyncio.Task[Any]] = []
        self.read: set[asyncio.Task[Any]] = set()
        self.watch(runs, store)

    def watch(self, runs: Any, store: FileStore) -> None:
        """Hold the decisions of one more server (its runs and its store object)."""
        decide, load = runs.decide, store.load_entries

        async def deciding(session_id: str, decision: ApprovalDecision) -> Any:
            task = asyncio.current_task()
            assert task is not None
            self.deciders.append(task)
            return await decide(session_id, decision)

        async def load_entries(session_id: str) -> list[Entry]:
            entries = await load(session_id)
            me = asyncio.current_task()
            if me in self.deciders and me not in self.read:
                assert me is not None
                self.read.add(me)
                await eventually(self._other_came(me), within=30, what="the other decision")
            return entries

        runs.decide = deciding
        store.load_entries = load_entries  # type: ignore[method-assign]

    def _other_came(self, me: asyncio.Task[Any]) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            others = [t for t in self.deciders if t is not me]
            return bool(others) and all(t in self.read or _waits_on_lock(t) for t in others)

        return probe


async def test_two_decisions_at_once_on_a_parked_turn_both_count(
    temporal: Client | None, tmp_path: Path
) -> None:
    """The run parked waiting for two mails; both are approved at once. Both decisions are on
    the session's active path, one run carries the turn out, and each mail is sent once."""
    SENT.clear()
    store, spec = FileStore(tmp_path / "sessions"), _spec()
    model = spec.model
    assert isinstance(model, ScriptedModel)
    async with (
        helper_app(temporal, store, spec, lambda: FileStore(store.root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        await client.post("/v1/sessions", json={"session_id": SID})
        async with stream(client, SID, after=0) as reader:
            started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail them"})
            first = started.json()["run_id"]
            await reader.until(ended(first), 60)
            AtOnce(app.state.server.runs, store)
            both = await asyncio.gather(
                *(
                    client.post(f"/v1/sessions/{SID}/approvals/call-{i}", json={"approved": True})
                    for i, _ in SENT_TO
                )
            )
            assert [r.status_code for r in both] == [200, 200], [r.text for r in both]
            stored = await store.load_entries(SID)
            active = path(stored, stored[-1].id)
            decided = sorted(e.tool_call_id for e in active if isinstance(e, ApprovalDecision))
            parents = [
                (e.tool_call_id, e.parent_id) for e in stored if isinstance(e, ApprovalDecision)
            ]
            assert decided == ["call-1", "call-2"], f"decisions (call, parent): {parents}"

            def others(r: Reader) -> set[str]:
                return {f.data["run_id"] for f in r.frames if f.event == "run"} - {first}

            await reader.until(others, 60)
            (second,) = others(reader)
            await reader.until(ended(second), 60)
            pending = (await client.get(f"/v1/sessions/{SID}/approvals")).json()["pending"]
            assert pending == []
        stored = await store.load_entries(SID)
    active = path(stored, stored[-1].id)
    said = [(e.message.role, e.message.text()) for e in active if isinstance(e, MessageEntry)]
    assert said[-3:] == [
        ("tool_result", "sent to bob"),
        ("tool_result", "sent to eve"),
        ("assistant", "Both sent."),
    ], said
    seen = [m.text() for m in model.requests[-1].messages if m.role == "tool_result"]
    assert seen == ["sent to bob", "sent to eve"], "the model saw both results"
    assert sorted(SENT) == ["bob", "eve"], f"mails sent: {SENT}"
    assert set(others(reader)) == {second}, "one run carried the turn out"


@pytest.mark.temporal
async def test_two_servers_deciding_a_parked_turn_at_once_both_count(
    temporal_client: Client, tmp_path: Path
) -> None:
    """Two replicas of the server (each its own store object, as two processes have; nothing
    but the store and Temporal shared) each take one of the two decisions at once, after both
    read the same leaf: both decisions end up on the active path, one after the other, and
    the turn is carried out once."""
    SENT.clear()
    store, spec = FileStore(tmp_path / "sessions"), _spec()
    other = FileStore(store.root)
    async with (
        helper_app(temporal_client, store, spec, lambda: FileStore(store.root)) as app,
        serving(app) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        async with replica(app, temporal_client, other) as (second, peer):
            await client.post("/v1/sessions", json={"session_id": SID})
            async with stream(client, SID, after=0) as reader:
                started = await client.post(f"/v1/sessions/{SID}/runs", json={"text": "Mail them"})
                first = started.json()["run_id"]
                await reader.until(ended(first), 60)
                at_once = AtOnce(app.state.server.runs, store)
                at_once.watch(second.state.server.runs, other)
                both = await asyncio.gather(
                    client.post(f"/v1/sessions/{SID}/approvals/call-1", json={"approved": True}),
                    peer.post(f"/v1/sessions/{SID}/approvals/call-2", json={"approved": True}),
                )
                assert [r.status_code for r in both] == [200, 200], [r.text for r in both]
                stored = await store.load_entries(SID)
                active = path(stored, stored[-1].id)
                decided = [e.tool_call_id for e in active if isinstance(e, ApprovalDecision)]
                parents = [
                    (e.tool_call_id, e.parent_id) for e in stored if isinstance(e, ApprovalDecision)
                ]
                assert sorted(decided) == ["call-1", "call-2"], f"(call, parent): {parents}"
                await reader.until(lambda r: _ran_after(r, first), 60)
        stored = await store.load_entries(SID)
    said = [e.message.text() for e in path(stored, stored[-1].id) if isinstance(e, MessageEntry)]
    assert said[-3:] == ["sent to bob", "sent to eve", "Both sent."], said
    assert sorted(SENT) == ["bob", "eve"], f"mails sent: {SENT}"


def _ran_after(reader: Reader, first: str) -> bool:
    """A run after ``first`` started and ended (the one that carried the turn out)."""
    later = {f.data["run_id"] for f in reader.frames if f.event == "run"} - {first}
    return any(ended(run)(reader) for run in later)
