"""Tool approval on every executor: the run waits for people with its requests and decisions
stored in the transcript (docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable_agent import (
    Agent,
    ApprovalDecision,
    ApprovalNotPendingError,
    ApprovalPendingError,
    ApprovalRequest,
    EntryEncodeError,
    Event,
    MessageEntry,
    RunCancelledError,
)
from durable_agent.ai import Reply, ScriptedModel, ToolCall, tool
from durable_agent.session import Store
from durable_agent.session.views import model_view
from tests.durable_runs.support import kinds
from tests.support.harness import Harness

SENT: list[dict[str, Any]] = []


@tool(approval=True)
async def send_email(to: str, body: str) -> str:
    """Send an email (a person approves each one)."""
    SENT.append({"to": to, "body": body})
    return f"sent to {to}"


LOOKED: list[str] = []


@tool
async def lookup(name: str) -> str:
    """Look a name up (never needs approval)."""
    LOOKED.append(name)
    return f"{name}: found"


def email(call_id: str = "c1", to: str = "bob@example.com") -> ToolCall:
    return ToolCall(id=call_id, name="send_email", arguments={"to": to, "body": "hi"})


@pytest.fixture(autouse=True)
def _clear() -> None:
    SENT.clear()
    LOOKED.clear()


class Reader:
    """Reads a run's events in the background; ``until`` waits for the next event of a type."""

    def __init__(self, stream: Any) -> None:
        self.events: list[Event] = []
        self._new = asyncio.Event()
        self.task = asyncio.ensure_future(self._read(stream.events()))

    async def _read(self, events: AsyncIterator[Event]) -> None:
        try:
            async for event in events:
                self.events.append(event)
                self._new.set()
        finally:
            self._new.set()

    async def until(self, kind: str, count: int = 1) -> Event:
        async def seen() -> Event:
            while True:
                found = [e for e in self.events if e.agent and e.agent.type == kind]
                if len(found) >= count:
                    return found[count - 1]
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"the run ended without {kind}: {kinds(self.events)}")
                self._new.clear()
                await self._new.wait()

        return await asyncio.wait_for(seen(), 30)

    async def done(self) -> list[Event]:
        await asyncio.wait_for(self.task, 30)
        return self.events


DECIDED_TURN = [
    "user",
    "assistant",
    "approval_request",
    "approval_decision",
    "tool_result",
    "assistant",
]
"""A turn whose one call waited for a decision, ran, and was answered."""


def stored(agent: Agent) -> list[Any]:
    return [e for e in agent.entries() if not (isinstance(e, MessageEntry) and e.ephemeral)]


def shape(entries: list[Any]) -> list[str]:
    out: list[str] = []
    for e in entries:
        if isinstance(e, MessageEntry):
            out.append(e.message.role)
        else:
            out.append(getattr(e, "kind", e.type))
    return out


async def test_approved_call_runs_after_the_decision(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(text="sending", tool_calls=[email()]), "done"], store=store, tools=[send_email]
    )
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    requested = await reader.until("approval_requested")
    assert requested.entries is not None
    (request,) = requested.entries
    assert isinstance(request, ApprovalRequest)
    assert (request.tool_call_id, request.tool_name) == ("c1", "send_email")
    assert request.run_id == stream.run_id
    assert SENT == []  # nothing runs ahead of the decision
    assert [p.tool_call_id for p in agent.pending_approvals()] == ["c1"]
    decision = await agent.decide("c1", True, decided_by="alice")
    assert isinstance(decision, ApprovalDecision) and decision.decided_by == "alice"
    # a resend (its answer lost) gets the stored decision, a different one names it
    assert await agent.decide("c1", True, decided_by="alice") == decision
    with pytest.raises(ApprovalNotPendingError) as other:
        await agent.decide("c1", False, decided_by="bob")
    assert other.value.decision_id == decision.id
    events = await reader.done()
    assert await agent.decide("c1", True, decided_by="alice") == decision
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    names = kinds(events, updates=False)
    assert names[:6] == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "approval_requested",
        "approval_decided",
    ]
    assert names[6] == "tool_execution_start"
    decided = [e for e in events if e.agent and e.agent.type == "approval_decided"]
    assert decided[0].entries == [decision]
    assert shape(stored(agent)) == DECIDED_TURN
    assert stream.pending == [] and agent.pending_approvals() == []


async def test_denied_call_is_answered_without_running(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "ok, not sent"], store=store, tools=[send_email]
    )
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    await agent.decide("c1", False, reason="not today")
    events = await reader.done()
    assert SENT == []
    end = next(e for e in events if e.agent and e.agent.type == "tool_execution_end")
    assert end.agent is not None and end.agent.is_error
    results = [e.message for e in stored(agent) if isinstance(e, MessageEntry)]
    assert results[2].role == "tool_result" and results[2].is_error
    assert results[2].text() == "tool call denied: not today"
    assert results[-1].text() == "ok, not sent"


async def test_edited_args_and_a_turn_waits_whole(harness: Harness, store: Store) -> None:
    calls = [ToolCall(id="l1", name="lookup", arguments={"name": "bob"}), email("c2")]
    agent = await harness.open(
        [Reply(tool_calls=calls), "done"], store=store, tools=[send_email, lookup]
    )
    stream = await agent.run("find and mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    assert LOOKED == []  # a turn's tools start only once every call is decided
    await agent.decide("c2", True, args={"to": "carol@example.com", "body": "hello"})
    await reader.done()
    assert LOOKED == ["bob"]
    assert SENT == [{"to": "carol@example.com", "body": "hello"}]
    results = [e.message for e in stored(agent) if isinstance(e, MessageEntry)][2:4]
    assert [m.tool_call_id for m in results] == ["l1", "c2"]  # call order


async def test_parked_run_is_decided_and_continued(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "done"],
        store=store,
        tools=[send_email],
        approval_wait=0.2,
    )
    stream = await agent.run("mail bob")
    produced = await asyncio.wait_for(stream.wait(), 30)
    assert [m.role for m in produced] == ["assistant"]
    assert [p.tool_call_id for p in stream.pending] == ["c1"]
    assert SENT == []
    with pytest.raises(ApprovalPendingError):
        await agent.run("something else")
    assert shape(stored(agent)) == ["user", "assistant", "approval_request"]
    first = await agent.decide("c1", True)
    assert await agent.decide("c1", True) == first  # re-sent: the same decision
    with pytest.raises(ApprovalNotPendingError) as refused:
        await agent.decide("c1", False)
    assert first.id in str(refused.value)
    stream = await agent.run()
    events = [e async for e in stream.events()]
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    assert kinds(events, updates=False)[:2] == ["agent_start", "tool_execution_start"]
    assert shape(stored(agent))[3:] == ["approval_decision", "tool_result", "assistant"]


async def test_repair_never_answers_a_pending_call(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "done"], store=store, tools=[send_email], approval_wait=0.1
    )
    stream = await agent.run("mail bob")
    await asyncio.wait_for(stream.wait(), 30)
    # a second handle resumes the session: its run waits instead of repairing the call
    again = await harness.open(
        ["done"], store=store, session_id=agent.session_id, tools=[send_email], approval_wait=30
    )
    stream = await again.run()
    reader = Reader(stream)
    await reader.until("agent_start")
    await again.decide("c1", False)
    await reader.done()
    texts = [e.message.text() for e in stored(again) if isinstance(e, MessageEntry)]
    assert "tool execution interrupted" not in texts
    assert texts[2] == "tool call denied"


async def test_a_decision_the_moment_a_run_resumes_the_turn_is_taken(
    harness: Harness, store: Store
) -> None:
    """A decision right after ``run()`` resumed a parked turn, before the run has loaded its
    session (in process: before its engine exists), is taken by the run: in process it was
    refused as ``RunActiveError`` (committed at the leaf of a busy handle), and the run parked
    again."""
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "done"], store=store, tools=[send_email], approval_wait=0.1
    )
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    again = await harness.open(
        ["done"], store=store, session_id=agent.session_id, tools=[send_email], approval_wait=30
    )
    stream = await again.run()
    decision = await again.decide("c1", True)  # no task in between
    assert [m.text() for m in await asyncio.wait_for(stream.wait(), 30)] == [
        "sent to bob@example.com",
        "done",
    ]
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    assert shape(stored(again))[3:] == ["approval_decision", "tool_result", "assistant"]
    assert stored(again)[3] == decision


async def test_cancel_during_the_wait(harness: Harness, store: Store) -> None:
    agent = await harness.open([Reply(tool_calls=[email()])], store=store, tools=[send_email])
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    await stream.cancel()
    with pytest.raises(RunCancelledError):
        await stream.wait()
    assert shape(stored(agent)) == ["user", "assistant", "approval_request", "tool_result"]
    assert stored(agent)[-1].message.text() == "tool execution cancelled"
    assert agent.pending_approvals() == []


async def test_fork_at_a_pending_approval(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "parent done", "child done"],
        store=store,
        tools=[send_email],
        approval_wait=0.1,
    )
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    child = await agent.fork()
    assert [p.tool_call_id for p in child.pending_approvals()] == ["c1"]
    await agent.decide("c1", True)
    await child.decide("c1", False, reason="not from the child")
    await asyncio.wait_for((await agent.run()).wait(), 30)
    await asyncio.wait_for((await child.run()).wait(), 30)
    parent_results = [e.message for e in stored(agent) if isinstance(e, MessageEntry)]
    child_results = [e.message for e in stored(child) if isinstance(e, MessageEntry)]
    assert parent_results[2].text() == "sent to bob@example.com"
    assert child_results[2].text() == "tool call denied: not from the child"
    assert len(SENT) == 1


async def test_a_decision_for_a_call_that_is_not_pending(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "done"], store=store, tools=[send_email]
    )
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    with pytest.raises(ApprovalNotPendingError) as refused:
        await agent.decide("another-runs-call", True)
    assert "another-runs-call" in str(refused.value)
    await agent.decide("c1", True)
    await reader.done()


async def test_a_decision_text_with_no_utf8_form_is_refused_typed(
    harness: Harness, store: Store
) -> None:
    """A reason, edited argument or name holding a lone surrogate (a Python string may; no
    store, payload or HTTP body can carry it) is refused with the stores' typed error, before
    anything is stored; the run waits on and takes a decision that can be stored."""
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "done"], store=store, tools=[send_email]
    )
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    before = await store.load_entries(agent.session_id)
    bad: list[dict[str, Any]] = [
        {"approved": False, "reason": "no\ud800"},
        {"approved": True, "args": {"to": "bob\udcff", "body": "hi"}},
        {"approved": True, "decided_by": "\udc80"},
    ]
    for decision in bad:
        with pytest.raises(EntryEncodeError) as refused:
            await agent.decide("c1", **decision)
        assert "lone surrogate" in str(refused.value), decision
    assert await store.load_entries(agent.session_id) == before
    assert [p.tool_call_id for p in agent.pending_approvals()] == ["c1"]
    await agent.decide("c1", True)
    await reader.done()
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]


async def test_compaction_keeps_a_pending_turn(harness: Harness, store: Store) -> None:
    agent = await harness.open(
        ["hello", Reply(tool_calls=[email()]), "Summary: they said hi.", "sent"],
        store=store,
        tools=[send_email],
        approval_wait=0.1,
    )
    await asyncio.wait_for((await agent.run("hi")).wait(), 30)
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    question = next(
        e for e in stored(agent) if isinstance(e, MessageEntry) and e.message.text() == "mail bob"
    )
    compaction = await agent.compact(keep_turns=0)
    assert compaction is not None and compaction.first_kept_id == question.id
    assert [p.tool_call_id for p in agent.pending_approvals()] == ["c1"]
    await agent.decide("c1", True)
    await asyncio.wait_for((await agent.run()).wait(), 30)
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    assert stored(agent)[-1].message.text() == "sent"


async def test_the_run_that_goes_on_after_a_compaction_reads_from_it(
    harness: Harness, store: Store
) -> None:
    """A session compacted while its run parked waiting for a decision: the run that carries
    the decided calls out sends the model the summary and the kept turn, not the history the
    summary stands for (it sent the whole uncompacted history, its reply's turn being
    stored before the compaction)."""
    lm = ScriptedModel(["hello", Reply(tool_calls=[email()]), "Summary: they said hi.", "sent"])
    agent = await harness.open(lm, store=store, tools=[send_email], approval_wait=0.1)
    await asyncio.wait_for((await agent.run("hi")).wait(), 30)
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    assert await agent.compact(keep_turns=0) is not None
    await agent.decide("c1", True)
    await asyncio.wait_for((await agent.run()).wait(), 30)
    seen = [(m.role, m.text()) for m in lm.requests[-1].messages]
    assert seen == [
        ("user", "Summary: they said hi."),
        ("user", "mail bob"),
        ("assistant", ""),
        ("tool_result", "sent to bob@example.com"),
    ]
    assert [(m.role, m.text()) for m in model_view(agent.entries())][:-1] == seen


async def test_a_decider_that_stops_waiting_leaves_the_run_going() -> None:
    """In process: ``decide`` cancelled once the waiting run took the decision (a timeout)
    does not fail the run: the decision is stored and the call runs."""
    from durable_agent import ScriptedModel, model, new
    from tests.durable_runs.test_steering import give_up_on_arrival

    lm = ScriptedModel([Reply(tool_calls=[email()]), "sent"])
    agent = await new(model(lm), tools=(send_email,))
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    decider: list[asyncio.Future[Any]] = []
    give_up_on_arrival(agent, decider)
    decider.append(asyncio.ensure_future(agent.decide("c1", True)))
    with pytest.raises(asyncio.CancelledError):
        await decider[0]
    await asyncio.wait_for(stream.wait(), 30)
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    assert shape(stored(agent)) == DECIDED_TURN


async def test_a_decision_the_moment_a_later_request_is_stored_is_taken() -> None:
    """In process: a caller that decides the moment the handle holds the run's second request
    (its pending list shows it; the run has not started that wait yet, and still holds its
    first, finished one) gets the decision taken, not refused as not pending."""
    from durable_agent import ScriptedModel, model, new

    lm = ScriptedModel(
        [Reply(tool_calls=[email("c1")]), Reply(tool_calls=[email("c2", "carol@x.org")]), "ok"]
    )
    agent = await new(model(lm), tools=(send_email,))
    state = agent.state
    applied = state.apply
    deciding: list[asyncio.Future[ApprovalDecision | Any]] = []

    def apply(stamped: Any) -> None:
        applied(stamped)
        asked = [e for e in stamped.durable if isinstance(e, ApprovalRequest)]
        if [r.tool_call_id for r in asked] == ["c2"]:
            assert [p.tool_call_id for p in agent.pending_approvals()] == ["c2"]
            deciding.append(asyncio.ensure_future(agent.decide("c2", True)))

    state.apply = apply  # type: ignore[method-assign]
    stream = await agent.run("mail bob, then carol")
    reader = Reader(stream)
    await reader.until("approval_requested")
    await agent.decide("c1", True)
    await reader.until("approval_requested", 2)
    decision = await deciding[0]
    await reader.done()
    assert isinstance(decision, ApprovalDecision) and decision.tool_call_id == "c2"
    assert [s["to"] for s in SENT] == ["bob@example.com", "carol@x.org"]
    assert shape(stored(agent))[-4:] == [
        "approval_request",
        "approval_decision",
        "tool_result",
        "assistant",
    ]


async def test_a_call_left_on_another_branch_is_refused_naming_the_path(
    harness: Harness, store: Store
) -> None:
    """Branching to before a parked turn and running from there leaves its call off the active
    path: deciding it is refused, saying the call is not pending on the session's active path
    (it said "in this run", with no run going), and stores nothing; a fresh handle agrees."""
    agent = await harness.open(
        [Reply(tool_calls=[email()]), "something else"],
        store=store,
        tools=[send_email],
        approval_wait=0.1,
    )
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    question = stored(agent)[0]
    await agent.branch(question.parent_id or "")
    await asyncio.wait_for((await agent.run("never mind")).wait(), 30)
    before = await store.load_entries(agent.session_id)
    again = await harness.open([], store=store, session_id=agent.session_id, tools=[send_email])
    for handle in (agent, again):
        with pytest.raises(ApprovalNotPendingError) as refused:
            await handle.decide("c1", True)
        assert str(refused.value) == (
            f"tool call 'c1' is not pending a decision on the active path of session "
            f"{agent.session_id!r}"
        )
        assert refused.value.decision_id is None
    assert await store.load_entries(agent.session_id) == before
    assert SENT == []


async def test_an_append_while_calls_wait_is_refused_as_a_run_is(
    harness: Harness, store: Store
) -> None:
    """``append`` after a parked turn stored its entry after the waiting calls: they were no
    longer pending (``pending_approvals()`` empty), the next run called the model, and the
    stored call stayed unanswered. It is refused as ``run`` with input is, nothing stored."""
    agent = await harness.open(
        [Reply(tool_calls=[email()])], store=store, tools=[send_email], approval_wait=0.1
    )
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)
    before = await store.load_entries(agent.session_id)
    with pytest.raises(ApprovalPendingError):
        await agent.append("also this")
    assert await store.load_entries(agent.session_id) == before
    assert [p.tool_call_id for p in agent.pending_approvals()] == ["c1"]


async def test_a_decision_while_a_cancelled_run_stores_its_answers_is_refused_at_once(
    store: Store,
) -> None:
    """In process, a decision that reaches a run after its cancel closed the inbox (the run is
    storing ``tool execution cancelled`` for the call) is refused then, as not pending in this
    run: it was queued where nothing took it any more, and refused only when the run ended,
    as 'the run ended before it started', a run that had started and was cancelled."""
    from durable_agent import model, new
    from tests.support.gated_store import GatedStore, has_role

    gated = GatedStore(store)  # type: ignore[arg-type]
    lm = ScriptedModel([Reply(tool_calls=[email()])])
    agent = await new(model(lm), store=gated, tools=(send_email,))
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    gated.arm(has_role("tool_result"))  # the cancellation's answer to the call: held once stored
    cancelling = asyncio.ensure_future(stream.cancel())
    await asyncio.wait_for(gated.entered.wait(), 30)
    deciding = asyncio.ensure_future(agent.decide("c1", True))
    done, _ = await asyncio.wait({deciding}, timeout=5)  # refused with no store write
    await gated.let_go()
    await cancelling
    with pytest.raises(RunCancelledError):
        await stream.wait()
    await asyncio.gather(reader.task, return_exceptions=True)
    assert done, "the decision waited for the run's end"
    with pytest.raises(ApprovalNotPendingError, match="not pending a decision in this run"):
        deciding.result()
    assert SENT == [] and stored(agent)[-1].message.text() == "tool execution cancelled"


async def test_a_decision_for_a_run_that_fails_as_it_starts_is_committed(store: Store) -> None:
    """In process, a decision sent the moment ``run()`` resumed a parked turn, to a run that
    then fails before it takes it (its model cannot be built), is committed at the leaf as with
    no run going, as on Temporal (the update fails and the handle commits it): it was refused,
    'the run ended before it started', and the decision was lost."""
    from durable_agent import model, new

    lm = ScriptedModel([Reply(tool_calls=[email()])])
    agent = await new(model(lm), store=store, tools=(send_email,), approval_wait=0.1)
    await asyncio.wait_for((await agent.run("mail bob")).wait(), 30)

    async def broken(_: Any) -> Any:
        await asyncio.sleep(0)  # the decision is queued first, as a slow start lets it be
        raise RuntimeError("no model configured")

    again = await new(broken, store=store, session_id=agent.session_id, tools=(send_email,))
    stream = await again.run()
    deciding = asyncio.ensure_future(again.decide("c1", True))
    with pytest.raises(RuntimeError, match="no model configured"):
        await asyncio.wait_for(stream.wait(), 30)
    decision = await asyncio.wait_for(deciding, 30)
    assert isinstance(decision, ApprovalDecision) and decision.approved
    assert stored(again)[-1] == decision
    assert shape(stored(again)) == ["user", "assistant", "approval_request", "approval_decision"]
    assert SENT == []


async def test_a_decision_as_the_run_parks_is_stored_for_the_next_run() -> None:
    """In process, a decision made while a run that parked closes its loop (a factory's loop
    whose close awaits: a provider's connection shut) is stored at the leaf for the next run,
    as at any other moment after the park: it was refused as ``RunActiveError`` (the run had
    let go of its inbox, the handle was still busy) and nothing was stored."""
    from durable_agent import model, new
    from durable_agent.agent.loop import Loop, build_loop

    closing, close = asyncio.Event(), asyncio.Event()
    lm = ScriptedModel([Reply(tool_calls=[email()]), "sent"])

    class ClosesSlowly:
        def __init__(self, inner: Loop) -> None:
            self.inner = inner
            self.run = inner.run

        async def aclose(self) -> None:
            closing.set()
            await close.wait()
            await self.inner.aclose()

    async def factory(options: Any) -> ClosesSlowly:
        return ClosesSlowly(await build_loop(model(lm), options))

    agent = await new(factory, tools=(send_email,), approval_wait=0.1)
    stream = await agent.run("mail bob")
    await asyncio.wait_for(closing.wait(), 30)  # parked: its loop closing
    # its first step runs before the loop's close goes on (it was refused in that step)
    deciding = asyncio.ensure_future(agent.decide("c1", True, decided_by="alice"))
    close.set()
    await asyncio.wait_for(stream.wait(), 30)
    decision = await asyncio.wait_for(deciding, 30)
    assert isinstance(decision, ApprovalDecision) and decision.decided_by == "alice"
    assert shape(stored(agent)) == ["user", "assistant", "approval_request", "approval_decision"]
    await asyncio.wait_for((await agent.run()).wait(), 30)
    assert SENT == [{"to": "bob@example.com", "body": "hi"}]
    assert shape(stored(agent))[-2:] == ["tool_result", "assistant"]
