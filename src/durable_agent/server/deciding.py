"""A decision no run takes, in the server: committed at the session's leaf, one at a time per
session, and then the run that carries out the turn it settled (docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable

from ..durable.agent import Agent
from ..durable.errors import RunActiveError, UnknownAgentError
from ..session.approvals import ApprovalDecision, awaiting_turn, tail_turn
from ..session.entries import Entry
from ..session.store import Store
from .runs import RunNotFoundError, Runs

__all__ = ["SessionLocks", "continue_settled", "decide_at_leaf", "decide_with", "going"]

logger = logging.getLogger("durable_agent.server")


class SessionLocks:
    """An ``asyncio.Lock`` per session, kept while anyone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())


async def decide_at_leaf(
    runs: Runs,
    store: Store,
    locks: SessionLocks,
    session_id: str,
    decision: ApprovalDecision,
    opened: Callable[[], Awaitable[Agent]],
) -> tuple[Entry, str | None]:
    """Decide with a handle ``opened`` at the session's leaf, then :func:`continue_settled`,
    one request of the session at a time: two that read one leaf would each store their
    decision under it, as siblings, and the path to the newest entry would hold one of them,
    the turn undecided for good. Across server processes the handle's guarded append keeps
    them in line (docs/design.md#approvals-and-steering); within one, this lock spares the
    retry."""
    async with locks(session_id):
        entry = await decide_with(await opened(), decision)
        return entry, await continue_settled(runs, store, session_id)


async def decide_with(handle: Agent, decision: ApprovalDecision) -> Entry:
    return await handle.decide(
        decision.tool_call_id,
        decision.approved,
        reason=decision.reason,
        args=decision.args,
        decided_by=decision.decided_by,
    )


async def continue_settled(
    runs: Runs, store: Store, session_id: str, agent: str | None = None
) -> str | None:
    """After a decision no run took (the run that asked parked, ended or lives elsewhere): when
    every call of the waiting turn is decided and nothing runs (the asker: by its own status),
    start the run that carries the calls out, as ``durable-agent approve`` does, under the
    turn's own ID (two servers settling it at once start one run); its ID, else ``None``. With
    several agents the server cannot tell which one asked (unless ``agent`` names it), and
    leaves it to the next run. The decision is stored: the store or Temporal failing now
    leaves it to the next run too (logged, one line), and a retry of the same decision,
    answered with the stored one, tries again (docs/design.md#http-api)."""
    try:
        runs.agent(agent)  # none to pick (several, none named): nothing to read, nothing to log
        if await runs.active(session_id):
            return None
        turn = awaiting_turn([entry for _, entry in await tail_turn(store, session_id)])
        if turn is None or turn.undecided():
            return None
        for asker in {r.run_id for r in turn.requests.values()}:
            if await going(runs, session_id, asker):
                return None  # it took the decisions: it carries the calls out
        run_id = turn.continuation_id()
        return await runs.start(
            session_id, [], leaf_id=None, agent=agent, on_busy="reject", run_id=run_id
        )
    except (UnknownAgentError, RunActiveError):
        return None
    except Exception as exc:
        logger.warning(
            "continuing %s after a decision: %s: %s", session_id, type(exc).__name__, exc
        )
        return None


async def going(runs: Runs, session_id: str, run_id: str) -> bool:
    """Whether the run goes on, by its own status (Temporal's list of running runs lags)."""
    try:
        return await runs.status(session_id, run_id) in ("started", "awaiting_approval")
    except RunNotFoundError:  # ended before this process started
        return False
