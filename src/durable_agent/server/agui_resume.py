"""An AG-UI input that answers the interrupts a run's stream ended with (docs/design.md#http-api).

Each interrupt is a call waiting for a person, of the call's ID. Its ``ResumeEntry`` decides
it the way ``POST /v1/sessions/{id}/approvals/{call}`` does, as the caller's principal:
``resolved`` with a payload of :class:`Answer` (none: approved as the model called it), or
``cancelled`` (the person dismissed the question: denied, the payload's reason kept). The run
that asked takes the decisions if it still waits, else the turn's calls are carried out by a
run started for them; the stream follows that run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ag_ui.core import ResumeEntry
from pydantic import BaseModel, ConfigDict, ValidationError

from ..durable.errors import UnknownAgentError
from ..session.approvals import ApprovalDecision, PendingItem, pending_at_tail
from ..session.entries import Entry
from ..session.store import Store
from .deciding import continue_settled, going
from .runs import Runs, Status

__all__ = ["ANSWER_SCHEMA", "Answer", "carry_out", "decisions", "not_started", "pending"]


class Answer(BaseModel):
    """The payload of a ``resolved`` resume entry: the person's decision on the call."""

    model_config = ConfigDict(extra="forbid", strict=True)

    approved: bool = True
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments the approved call runs with (``None``: as the model gave them)."""


ANSWER_SCHEMA = Answer.model_json_schema()
"""What an interrupt asks for (its ``responseSchema``), for a client to build its form from."""


def _decision(entry: ResumeEntry, principal: str | None) -> ApprovalDecision:
    try:
        answer = Answer.model_validate(entry.payload or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(
            f"the resume entry for interrupt {entry.interrupt_id!r} has a payload that is not"
            f" an answer ({{approved, reason, args}}): {problems}"
        ) from None
    approved = answer.approved and entry.status == "resolved"
    return ApprovalDecision(
        tool_call_id=entry.interrupt_id,
        approved=approved,
        reason=answer.reason,
        args=answer.args if approved else None,
        decided_by=principal,
    )


def decisions(
    resume: Sequence[ResumeEntry], waiting: Sequence[PendingItem], principal: str | None
) -> list[ApprovalDecision]:
    """The decisions ``resume`` makes, else ``ValueError`` (a 400, before anything is
    decided): an answer to a call that does not wait (decided already, or never asked), or
    two answers to one call."""
    asked = {p.tool_call_id for p in waiting}
    named = [entry.interrupt_id for entry in resume]
    unknown = [i for i in named if i not in asked]
    if unknown:
        waits = ", ".join(sorted(asked)) or "none"
        raise ValueError(
            f"the resume answers interrupts that do not wait: {', '.join(unknown)}"
            f" (the calls waiting for a person: {waits})"
        )
    if len(set(named)) != len(named):
        raise ValueError("the resume answers an interrupt twice")
    return [_decision(entry, principal) for entry in resume]


async def carry_out(
    runner: Runs,
    store: Store,
    sid: str,
    made: Sequence[ApprovalDecision],
    waiting: Sequence[PendingItem],
    agent: str | None,
) -> tuple[str, Status]:
    """Decide the calls (the stream has joined the hub); the run the stream follows and the
    status no frame will tell (``started``: the frames tell it all). The run that asked, when
    it went on before the decisions (it takes them; its frames come), else the run started
    for the turn they settled (by the last decision, or here with the route's agent, which a
    server of several agents cannot pick itself); a parked turn with calls the resume left
    undecided still waits, with no run."""
    asker = next(p.run_id for p in waiting if p.tool_call_id == made[0].tool_call_id)
    went_on = await going(runner, sid, asker)
    continued: str | None = None
    for decision in made:
        _, started = await runner.decide(sid, decision)
        continued = started or continued
    answered = {d.tool_call_id for d in made}
    left = any(p.tool_call_id not in answered for p in waiting)
    if continued is not None:
        return continued, "started"
    if went_on:
        return asker, "awaiting_approval" if left else "started"
    if left:
        return "", "awaiting_approval"
    try:
        runner.agent(None)  # the decisions' own start had it: it failed, and logged it once
    except UnknownAgentError:
        continued = await continue_settled(runner, store, sid, agent)
    return (continued, "started") if continued else ("", "failed")


def not_started(runner: Runs, agent: str | None) -> dict[str, str]:
    """Why no run carries out the calls a resume decided, as the stream's ``RUN_ERROR`` says
    it: a server of several agents cannot tell which asked (the route names none), else the
    start failed (the store or Temporal: :func:`continue_settled` logged it; a client is told
    nothing of the server). Either way a run started with no input carries them out, and a
    resume sent again is refused (the calls no longer wait), so the message says how."""
    run = 'POST /v1/sessions/{id}/runs {"inputs": []'
    try:
        runner.agent(agent)
    except UnknownAgentError:
        start = f'start a run of the agent with no input ({run}, "agent": NAME}})'
        why = (
            "no run carries them out (this server has several agents, and the resume named"
            f" none): {start}, and name it in the next resume (/v1/agui/{{agent}})"
        )
    else:
        named = "" if agent is None else f', "agent": "{agent}"'
        start = f"start one with no input ({run}{named}}})"
        why = f"the run that carries them out did not start (the server logged why): {start}"
    return {"type": "NoRunStarted", "message": f"the calls are decided; {why}"}


def pending(found: list[tuple[int, Entry]]) -> tuple[int, list[PendingItem]]:
    """The waiting calls of the session's active path (to its last entry), as the approvals
    route lists them, and the seq of the last one's request."""
    entries = [entry for _, entry in found]
    items = pending_at_tail(entries)
    requests = {p.request_id for p in items}
    return max((seq for seq, e in found if e.id in requests), default=0), items
