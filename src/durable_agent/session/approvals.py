"""Approval entries: a tool call's request for a person's decision, and the decision.

Both are reserved custom kinds (docs/design.md#approvals-and-steering): stored in the transcript,
never sent to the model. A call is **pending** when the path holds its request, no decision for
it and no result answering it. What a run that starts on such a path must do, and what run-start
repair must leave alone, are read from the path here, for both executors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..ai.messages import Message, ToolCall
from .entries import CustomEntry, Entry, MessageEntry, register_custom
from .repair import start_repairs
from .store import Store, last_entries
from .tree import path
from .views import raw_model_view

__all__ = [
    "APPROVAL_DECISION",
    "APPROVAL_REQUEST",
    "ApprovalDecision",
    "ApprovalRequest",
    "AwaitingTurn",
    "PendingItem",
    "awaiting_turn",
    "decision_entry_id",
    "edited_args",
    "pending_at_tail",
    "pending_in",
    "pending_items",
    "request_entry_id",
    "requests_for",
    "requests_after",
    "run_start_repairs",
    "sent_message",
    "tail_turn",
]

APPROVAL_REQUEST = "approval_request"
APPROVAL_DECISION = "approval_decision"
TAIL_WINDOW = 32
"""Entries :func:`tail_turn` reads first: a turn's reply, its requests, decisions and results."""


@register_custom(APPROVAL_REQUEST)
class ApprovalRequest(CustomEntry):
    """A call that waits for a person: committed by the run right after the assistant message
    that made it, one per call needing approval, in call order."""

    kind: str = APPROVAL_REQUEST
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    run_id: str
    """The run that asked (on Temporal: the run workflow a decision is sent to first)."""


def edited_args(asked: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments a call runs with when a person changes some of those it ``asked`` for:
    ``changes`` over them, the others kept (``None`` when they change nothing). A decision's
    ``args`` replace the call's whole, so a front end that sent only the fields a person
    changed would run the call without the rest."""
    merged = {**asked, **changes}
    return None if merged == asked else merged


@register_custom(APPROVAL_DECISION)
class ApprovalDecision(CustomEntry):
    """A person's decision on one call. Its ID is derived from its request's
    (:func:`decision_entry_id`), so the first decision stored wins in every process."""

    kind: str = APPROVAL_DECISION
    tool_call_id: str
    approved: bool
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments the call runs with instead of the model's."""
    decided_by: str | None = None

    def same_decision(self, other: ApprovalDecision) -> bool:
        """Whether ``other`` says what this says (a re-sent decision, not a second one)."""
        keys = ("tool_call_id", "approved", "reason", "args", "decided_by")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


class PendingItem(BaseModel):
    """A pending call as ``pending_approvals()``, ``stream.pending`` and ``state()`` show it."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    request_id: str
    run_id: str


def request_entry_id(reply_id: str, tool_call_id: str) -> str:
    """The ID of the request for call ``tool_call_id`` of the reply stored as ``reply_id``,
    where a producer commits the requests with the reply (the Temporal model call): a retried
    commit finds its own."""
    return hashlib.sha256(f"request\n{reply_id}\n{tool_call_id}".encode()).hexdigest()[:16]


def requests_for(reply: MessageEntry, ask: Sequence[str], run_id: str) -> list[ApprovalRequest]:
    """The requests for the calls ``ask`` of the stored ``reply``, chained after it in call
    order under derived IDs and the reply's ``created_at``."""
    calls = {c.id: c for c in reply.message.tool_calls()}
    out: list[ApprovalRequest] = []
    parent = reply.id
    for call_id in ask:
        call = calls[call_id]
        request = ApprovalRequest(
            id=request_entry_id(reply.id, call_id),
            parent_id=parent,
            created_at=reply.created_at,
            tool_call_id=call_id,
            tool_name=call.name,
            args=call.arguments,
            run_id=run_id,
        )
        out.append(request)
        parent = request.id
    return out


def decision_entry_id(request_id: str) -> str:
    """The one ID every decision on request ``request_id`` is stored under: a second, different
    decision conflicts in the store, a re-sent identical one is idempotent. A fork's copy of a
    request has its own ID, so a fork child decides independently."""
    return hashlib.sha256(f"decision\n{request_id}".encode()).hexdigest()[:16]


@dataclass
class AwaitingTurn:
    """The path's last turn whose calls wait for decisions or for running after them: its
    assistant message, where it sits on the path, its requests and decisions by call ID, and
    the results already stored."""

    assistant: Message
    index: int
    """Position of the assistant message on the path."""
    assistant_parent: str = ""
    """The assistant entry's parent (``""``: a root)."""
    requests: dict[str, ApprovalRequest] = field(default_factory=dict)
    decisions: dict[str, ApprovalDecision] = field(default_factory=dict)
    results: list[Message] = field(default_factory=list)
    assistant_id: str = ""
    """The assistant entry's ID."""

    def continuation_id(self) -> str:
        """The ID of the run that carries out the turn's calls once all are decided: each
        process that finds the turn settled starts this one run (a start of it that finds it
        started follows it), so two decisions at two servers never run a call twice."""
        return hashlib.sha256(f"continue\n{self.assistant_id}".encode()).hexdigest()[:16]

    @property
    def calls(self) -> list[ToolCall]:
        return [c for c in self.assistant.tool_calls() if not c.server]

    def undecided(self) -> list[ToolCall]:
        """Calls with a request, no decision and no result: the pending ones, in call order."""
        answered = {r.tool_call_id for r in self.results}
        return [
            c
            for c in self.calls
            if c.id in self.requests and c.id not in self.decisions and c.id not in answered
        ]

    def pending(self) -> list[PendingItem]:
        """The undecided calls as their requests show them."""
        requests = [self.requests[c.id] for c in self.undecided()]
        return [
            PendingItem(
                tool_call_id=r.tool_call_id,
                tool_name=r.tool_name,
                args=r.args,
                request_id=r.id,
                run_id=r.run_id,
            )
            for r in requests
        ]

    def unanswered(self) -> list[ToolCall]:
        answered = {r.tool_call_id for r in self.results}
        return [c for c in self.calls if c.id not in answered]


def awaiting_turn(path: Sequence[Entry]) -> AwaitingTurn | None:
    """The path's tail turn if its assistant message has approval requests and unanswered calls
    (nothing but its requests, decisions and results after it); else ``None``."""
    tail: list[Entry] = []
    for i in range(len(path) - 1, -1, -1):
        entry = path[i]
        if isinstance(entry, MessageEntry) and entry.message.role == "assistant":
            turn = AwaitingTurn(entry.message, i, entry.parent_id or "", assistant_id=entry.id)
            for e in reversed(tail):
                if isinstance(e, ApprovalRequest):
                    turn.requests[e.tool_call_id] = e
                elif isinstance(e, ApprovalDecision):
                    turn.decisions.setdefault(e.tool_call_id, e)
                elif isinstance(e, MessageEntry) and e.message.role == "tool_result":
                    turn.results.append(e.message)
            if turn.requests and turn.unanswered():
                return turn
            return None
        if not _after_reply(entry):
            return None
        tail.append(entry)
    return None


def _after_reply(entry: Entry) -> bool:
    """What may stand between a turn's reply and the path's end while its calls wait: their
    requests, decisions and results (and entries that are neither a message nor custom)."""
    if isinstance(entry, MessageEntry):
        return entry.message.role == "tool_result"
    return not isinstance(entry, CustomEntry) or isinstance(
        entry, ApprovalRequest | ApprovalDecision
    )


async def tail_turn(store: Store, session_id: str) -> list[tuple[int, Entry]]:
    """The end of the session's active path (to its last entry) that :func:`awaiting_turn`
    reads, with the entries' seqs: from the nearest entry that is no request, decision or
    result on. Read from the end of the log, a window at a time growing eightfold until the
    walk ends inside it (the whole log only for a walk that needs it): what waits for a person
    in a long session is asked for often, by people and front ends, and costs a few entries,
    not the session."""
    window = TAIL_WINDOW
    while True:
        found = await last_entries(store, session_id, window)
        index: dict[str, Entry] = {}
        seqs: dict[str, int] = {}
        for seq, entry in found:
            index.setdefault(entry.id, entry)
            seqs.setdefault(entry.id, seq)
        walk = path(index, found[-1][1].id) if found else []
        edge = next((i for i in range(len(walk) - 1, -1, -1) if not _after_reply(walk[i])), None)
        if edge is not None or len(found) < window or not walk or walk[0].parent_id is None:
            # the turn's edge found, the whole log read, or the path's root reached
            return [(seqs[e.id], e) for e in walk[edge or 0 :]]
        window *= 8


async def pending_in(store: Store, session_id: str) -> list[PendingItem]:
    """The pending calls of a session's active path to its last entry, read from ``store``
    (:func:`tail_turn`): what :func:`pending_at_tail` says of the session's whole log."""
    return pending_items([entry for _, entry in await tail_turn(store, session_id)])


def run_start_repairs(path: Sequence[Entry]) -> list[MessageEntry]:
    """Run-start repair of ``path`` (docs/design.md#repair-and-reconcile), which never answers a
    call waiting for people: a tail turn with approval requests is left to the run."""
    if awaiting_turn(path) is not None:
        return []
    return start_repairs(raw_model_view(path))


def pending_items(path: Sequence[Entry]) -> list[PendingItem]:
    """The pending calls of ``path`` in call order (docs/design.md#approvals-and-steering)."""
    turn = awaiting_turn(path)
    return [] if turn is None else turn.pending()


def pending_at_tail(entries: Sequence[Entry]) -> list[PendingItem]:
    """The pending calls of a session's active path to its last entry (``entries`` as stored):
    what a person is asked to decide, whichever process asks."""
    return pending_items(path(entries, entries[-1].id)) if entries else []


def sent_message(entry: Entry) -> bool:
    """A user message: in a run's chain after its input, one sent into the run."""
    return isinstance(entry, MessageEntry) and entry.message.role == "user" and not entry.synthetic


def requests_after(reply: Entry, following: list[Entry]) -> list[ApprovalRequest]:
    """The approval requests stored with ``reply`` (one append, chained after it)."""
    out: list[ApprovalRequest] = []
    parent = reply.id
    for entry in following:
        if isinstance(entry, ApprovalRequest) and (entry.parent_id or "") == parent:
            out.append(entry)
            parent = entry.id
    return out
