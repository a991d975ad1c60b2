"""Deciding a pending call from a handle (docs/design.md#approvals-and-steering).

A live run that waits for the call gets the decision (in process through its inbox; on Temporal
through the run workflow's ``decide`` update, which the executor sends). Otherwise the decision is
committed at the handle's leaf like ``append``, under the ID derived from its request, so the first
decision stored wins in every process: a second, different one conflicts in the store and is
refused naming the winner; a re-sent identical one returns the stored entry, whether the run
still waits, goes on or has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..agent.approval import denied_result
from ..ai.messages import ToolCall
from ..session.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    awaiting_turn,
    decision_entry_id,
)
from ..session.entries import Entry, MessageEntry
from ..session.errors import EntryConflictError, StoreUnavailableError
from .approvals import not_pending
from .errors import RunNotAcceptingError
from .limits import check_entry
from .state import LeafMovedOn, SessionState

__all__ = ["LiveDecider", "commit_decision", "decide"]

GUARDED_TRIES = 8
"""Rounds a decision takes in appends of other processes before it gives up (each round
means another process stored something in the meantime)."""

LiveDecider = Callable[[SessionState, ApprovalDecision], Awaitable[Entry | None]]
"""An executor's way to hand a decision to a live run elsewhere (``None``: no live run took
it)."""


async def decide(
    state: SessionState, decision: ApprovalDecision, remote: LiveDecider | None = None
) -> Entry:
    """Hand ``decision`` to the run that waits for it, or commit it at the leaf."""
    _check_size(state, decision)
    call_id = decision.tool_call_id
    decided = _decided(state, call_id)
    if decided is not None:  # a resend gets the stored decision whenever it comes
        if decided.same_decision(decision):
            return decided
        raise not_pending(call_id, decided.id)
    engine = state.live_run
    if engine is not None:
        waiting = engine.waiting
        if waiting is not None and waiting.turn.undecided():
            waiting.check(call_id, engine.inbox.deciding(call_id))
        elif call_id not in {p.tool_call_id for p in state.pending()}:
            raise _refusal(state, decision)
        # a run starting on this tail, or that stored (or is storing) requests it has not
        # started waiting on (its last wait is over), takes it once it waits; a decider that
        # stops waiting leaves it taken (docs/design.md#approvals-and-steering)
        try:
            return await asyncio.shield(engine.inbox.decide(decision))
        except RunNotAcceptingError:  # it ended before it took it (it failed as it started)
            await state.run_ended()  # then as with no run going, as on Temporal (below)
            return await commit_decision(state, decision)
    if remote is not None:
        known = _pending_request(state, decision)
        if not isinstance(known, ApprovalRequest):
            return known  # the same decision, stored already
        entry = await remote(state, decision)
        if entry is not None:
            if (entry.parent_id or "") == state.leaf:  # its receipt, chained at the leaf
                async with state.lock:
                    state.follow([entry])
            return entry
    # the handle's run, if one goes on, does not take it (on Temporal it ended without it; in
    # process it let go of its inbox and closes its loop): its last receipts first
    await state.run_ended()
    return await commit_decision(state, decision)


def _check_size(state: SessionState, decision: ApprovalDecision) -> None:
    """The decision, and a denial's answer (it quotes the reason), as stored (with their
    header) fit the payload limit: a run storing either over it would fail
    (docs/design.md#bounded-history)."""
    check_entry(decision, "approval decision")
    if decision.approved or not decision.reason:
        return
    names = {p.tool_call_id: p.tool_name for p in state.pending()}
    call = ToolCall(id=decision.tool_call_id, name=names.get(decision.tool_call_id, ""))
    answer = MessageEntry(message=denied_result(call, decision.reason))
    check_entry(answer, "the denied call's answer (it quotes the reason)")


def _decided(state: SessionState, call_id: str) -> ApprovalDecision | None:
    """The decision the handle knows stored on the newest request of ``call_id`` on its path
    (a model may use a call ID again in a later reply: ``call_0`` in every one)."""
    for entry in reversed(state.path()):
        if isinstance(entry, ApprovalRequest) and entry.tool_call_id == call_id:
            found = state.index.get(decision_entry_id(entry.id))
            return found if isinstance(found, ApprovalDecision) else None
    return None


def _refusal(state: SessionState, decision: ApprovalDecision) -> Exception:
    turn = awaiting_turn(state.path())
    decided = None if turn is None else turn.decisions.get(decision.tool_call_id)
    return not_pending(decision.tool_call_id, None if decided is None else decided.id)


def _pending_request(
    state: SessionState, decision: ApprovalDecision
) -> ApprovalRequest | ApprovalDecision:
    """The request of the pending call ``decision`` is for; the stored decision if it says the
    same; else :class:`ApprovalNotPendingError` (naming the stored decision, if any)."""
    turn = awaiting_turn(state.path())
    call_id = decision.tool_call_id
    request = None if turn is None else turn.requests.get(call_id)
    # no run is asked: the call may wait on a branch the leaf left, a run is no place to name
    where = f"on the active path of session {state.session_id!r}"
    if turn is None or request is None:
        raise not_pending(call_id, None, where)
    decided = turn.decisions.get(call_id)
    if decided is not None:
        if decided.same_decision(decision):
            return decided
        raise not_pending(call_id, decided.id)
    if call_id not in {c.id for c in turn.undecided()}:
        raise not_pending(call_id, None, where)  # answered already
    return request


async def commit_decision(state: SessionState, decision: ApprovalDecision) -> Entry:
    """Commit ``decision`` at the leaf (no live run waits for it), only while nothing was
    stored since the handle last read the session: two processes that read one leaf must not
    both store under it (siblings, the path holding one of them), so one that finds appends of
    another process takes them in, moves its leaf down the branch they grew (if they grew its
    own), and decides again from there, as if it had read the session a moment later
    (docs/design.md#approvals-and-steering)."""
    for _ in range(GUARDED_TRIES):
        try:
            return await _commit(state, decision)
        except LeafMovedOn:
            stored = await state.store.load_entries(state.session_id)
            async with state.lock:
                state.follow(stored)
    raise StoreUnavailableError(
        f"session {state.session_id!r} kept changing while a decision was stored (retry it)"
    )


async def _commit(state: SessionState, decision: ApprovalDecision) -> Entry:
    request = _pending_request(state, decision)
    if not isinstance(request, ApprovalRequest):
        return request
    call_id = decision.tool_call_id
    entry = decision.model_copy(update={"id": decision_entry_id(request.id)})
    try:
        stamped = await state.persist([entry], keep_ids=True, guarded=True)
    except EntryConflictError:
        winner = await _stored(state, entry.id)
        if isinstance(winner, ApprovalDecision) and winner.same_decision(decision):
            state.apply_receipt(
                [winner], winner.id if (winner.parent_id or "") == state.leaf else state.leaf
            )
            return winner
        raise not_pending(call_id, entry.id) from None
    return stamped.durable[0]


async def _stored(state: SessionState, entry_id: str) -> Entry | None:
    for entry in await state.store.load_entries(state.session_id):
        if entry.id == entry_id:
            return entry
    return None
