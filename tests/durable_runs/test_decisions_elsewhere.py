"""Decisions a handle commits after another process (another handle on the session, as a second
server or a CLI has) stored something it has not read: each lands on the branch as it is
stored, never as a sibling of what the other stored (docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio

import pytest

from durable_agent import (
    Agent,
    ApprovalDecision,
    ApprovalNotPendingError,
    ApprovalRequest,
    RunStream,
)
from durable_agent.ai import Reply
from durable_agent.session import Store
from durable_agent.session.tree import path
from tests.durable_runs.test_approvals import SENT, email, send_email
from tests.support.harness import Harness


async def _parked(harness: Harness, store: Store, *replies: Reply | str) -> Agent:
    """A handle whose run parked on a turn of two calls waiting for people (c1, c2)."""
    two = Reply(tool_calls=[email("c1", "bob@example.com"), email("c2", "eve@example.com")])
    agent = await harness.open([two, *replies], store=store, tools=[send_email], approval_wait=0.1)
    await asyncio.wait_for((await agent.run("mail them")).wait(), 30)
    return agent


async def test_a_decision_after_one_it_had_not_read_goes_after_it(
    harness: Harness, store: Store
) -> None:
    """``late`` read the session before ``first`` decided c1. Its decision on c2 is stored
    after c1's (not beside it), its different decision on c1 is refused naming c1's, and a
    run of it carries both calls out, in call order."""
    SENT.clear()
    first = await _parked(harness, store)
    sid = first.session_id
    late = await harness.open(["Both sent."], store=store, session_id=sid, tools=[send_email])
    one = await first.decide("c1", True)
    two = await late.decide("c2", True)
    assert two.parent_id == one.id
    stored_ids = [e.id for e in await store.load_entries(sid)]
    assert [e.id for e in late.entries()] == stored_ids, "the handle holds what is stored"
    assert late.leaf_id == two.id
    with pytest.raises(ApprovalNotPendingError) as refused:
        await late.decide("c1", False)
    assert refused.value.decision_id == one.id
    stored = await store.load_entries(sid)
    decided = [e.id for e in path(stored, stored[-1].id) if isinstance(e, ApprovalDecision)]
    assert decided == [one.id, two.id]
    await asyncio.wait_for((await late.run()).wait(), 30)
    assert [s["to"] for s in SENT] == ["bob@example.com", "eve@example.com"]


async def test_a_handle_left_on_an_older_branch_decides_at_its_leaf(
    harness: Harness, store: Store
) -> None:
    """While ``stay`` waits on the parked turn, ``first`` branches to before it and runs: a
    decision of ``stay`` is stored on its own branch, under the request it read, as a handle
    runs from its own leaf."""
    first = await _parked(harness, store, "something else")
    sid = first.session_id
    stay = await harness.open([], store=store, session_id=sid, tools=[send_email])
    question = (await store.load_entries(sid))[0]
    await first.branch(question.parent_id or "")
    await asyncio.wait_for((await first.run("never mind")).wait(), 30)
    decision = await stay.decide("c1", True)
    requests = [e for e in await store.load_entries(sid) if isinstance(e, ApprovalRequest)]
    assert decision.parent_id == requests[-1].id


async def test_two_handles_on_an_older_branch_decide_one_after_the_other(
    harness: Harness, store: Store
) -> None:
    """``first`` branched away from the parked turn and ran; ``one`` and ``two``, opened after
    that, both go back to the turn. Their decisions on c1 and c2 are stored on one path under
    it (the second after the first, not beside it), though neither handle is at the session's
    newest entry."""
    first = await _parked(harness, store, "something else")
    sid, parked = first.session_id, first.leaf_id
    question = (await store.load_entries(sid))[0]
    await first.branch(question.parent_id or "")
    await asyncio.wait_for((await first.run("never mind")).wait(), 30)
    one = await harness.open([], store=store, session_id=sid, tools=[send_email])
    two = await harness.open([], store=store, session_id=sid, tools=[send_email])
    await one.branch(parked)
    await two.branch(parked)
    c1 = await one.decide("c1", True)
    c2 = await two.decide("c2", True)
    assert c2.parent_id == c1.id
    assert two.leaf_id == c2.id
    assert [e.id for e in two.entries()] == [e.id for e in await store.load_entries(sid)]


async def _waiting(harness: Harness, store: Store) -> tuple[Agent, RunStream]:
    """A handle whose run waits (it does not park) for a decision on c1."""
    script: list[Reply | str] = [Reply(tool_calls=[email("c1")]), "Sent.", "You are welcome."]
    agent = await harness.open(script, store=store, tools=[send_email], approval_wait=60)
    stream = await agent.run("mail Bob")
    async for event in stream.events():
        if event.agent is not None and event.agent.type == "approval_requested":
            return agent, stream
    raise AssertionError("the run ended without asking")


async def test_a_handle_that_read_a_waiting_turn_goes_on_after_the_run_that_carried_it_out(
    harness: Harness, store: Store
) -> None:
    """``late`` read the session while c1 waited; ``first`` decided it and its run answered.
    A message sent through ``late`` was refused as if c1 still waited ("decide them and run()
    with no input", which would have run the call again); it goes on after the run's reply."""
    SENT.clear()
    first, stream = await _waiting(harness, store)
    late = await harness.open(
        ["You are welcome."], store=store, session_id=first.session_id, tools=[send_email]
    )
    assert [p.tool_call_id for p in late.pending_approvals()] == ["c1"]
    await first.decide("c1", True)
    await asyncio.wait_for(stream.wait(), 30)
    reply = first.leaf_id
    await asyncio.wait_for((await late.run("thanks")).wait(), 30)
    path_ids = [e.id for e in path(await store.load_entries(first.session_id), late.leaf_id)]
    assert reply in path_ids and path_ids.index(reply) == len(path_ids) - 3  # thanks, answer
    assert late.pending_approvals() == [] and len(SENT) == 1  # the call ran once


async def test_a_decision_handed_to_a_run_elsewhere_is_on_the_deciding_handle(
    harness: Harness, store: Store
) -> None:
    """On Temporal a handle that did not start the waiting run hands it its decision (the run
    stores it): the handle still listed the call as pending, as if it had not decided."""
    if harness.name != "temporal":
        pytest.skip("in process only the handle running the run hands it a decision")
    SENT.clear()
    first, stream = await _waiting(harness, store)
    sid = first.session_id
    other = await harness.open(["Anytime."], store=store, session_id=sid, tools=[send_email])
    decision = await other.decide("c1", True)
    assert other.pending_approvals() == []
    assert other.leaf_id == decision.id
    await asyncio.wait_for(stream.wait(), 30)
    await asyncio.wait_for((await other.run("thanks")).wait(), 30)  # after the run's reply
    assert first.leaf_id in [e.id for e in path(await store.load_entries(sid), other.leaf_id)]
    assert len(SENT) == 1


async def test_a_handle_goes_on_with_decisions_another_process_stored(
    harness: Harness, store: Store
) -> None:
    """``first``'s run parked on c1 and c2; ``other`` (a server, a CLI) decided both, stored at
    the session's leaf. ``first``, which has not read them, goes on with ``run()``: from the
    decisions, running each call once, not from its own older leaf asking for them again."""
    SENT.clear()
    first = await _parked(harness, store, "Both sent.")
    other = await harness.open([], store=store, session_id=first.session_id, tools=[send_email])
    await other.decide("c1", True)
    await other.decide("c2", False, reason="not eve")
    stream = await first.run()
    await asyncio.wait_for(stream.wait(), 30)
    assert [s["to"] for s in SENT] == ["bob@example.com"]
    assert first.pending_approvals() == [] and stream.pending == []
    assert first.messages()[-1].content[0].text == "Both sent."  # type: ignore[union-attr]


async def test_a_call_id_the_model_used_before_is_decided_for_the_turn_that_waits(
    harness: Harness, store: Store
) -> None:
    """Some models number their calls per reply (``call_0`` every time). With an earlier turn's
    call of that ID decided on the path, deciding the waiting one returned the earlier decision
    and stored nothing: the call could never be decided, its run parked for good."""
    SENT.clear()
    script: list[Reply | str] = [
        Reply(tool_calls=[email("c1", "bob@example.com")]),
        "Sent to Bob.",
        Reply(tool_calls=[email("c1", "eve@example.com")]),
        "Sent to Eve.",
    ]
    agent = await harness.open(script, store=store, tools=[send_email], approval_wait=0.1)
    await asyncio.wait_for((await agent.run("mail Bob")).wait(), 30)
    first = await agent.decide("c1", True)
    await asyncio.wait_for((await agent.run()).wait(), 30)
    await asyncio.wait_for((await agent.run("mail Eve")).wait(), 30)
    assert [p.args["to"] for p in agent.pending_approvals()] == ["eve@example.com"]
    second = await agent.decide("c1", True)
    assert second.id != first.id
    assert agent.pending_approvals() == []
    await asyncio.wait_for((await agent.run()).wait(), 30)
    assert [s["to"] for s in SENT] == ["bob@example.com", "eve@example.com"]


async def test_a_call_id_used_again_within_one_run_is_decided_each_time(
    harness: Harness, store: Store
) -> None:
    """The same, within one run: its second turn asks about a call of the first one's ID."""
    SENT.clear()
    script: list[Reply | str] = [
        Reply(tool_calls=[email("c1", "bob@example.com")]),
        Reply(tool_calls=[email("c1", "eve@example.com")]),
        "Both sent.",
    ]
    agent = await harness.open(script, store=store, tools=[send_email], approval_wait=30)
    stream = await agent.run("mail Bob, then Eve")
    decided = []
    async for event in stream.events():
        if event.agent is not None and event.agent.type == "approval_requested":
            decided.append(await agent.decide("c1", True))
    assert len({d.id for d in decided}) == 2
    assert [s["to"] for s in SENT] == ["bob@example.com", "eve@example.com"]
    assert agent.pending_approvals() == []
