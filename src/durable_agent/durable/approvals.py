"""The run's approval step: request, wait, decide (docs/design.md#approvals-and-steering).

The engine calls :func:`settle` when an assistant message with calls is stored (its receipt
out), or when a run starts on a tail whose calls wait. It commits every ``approval_request`` in
one batch right after the reply and emits ``approval_requested``; the run is then
``awaiting_approval`` until each call is decided: it waits on its :class:`~.inbox.Inbox` through
its :class:`ApprovalGate` (in process an asyncio wait, on Temporal ``workflow.wait_condition``:
one timer, no activity), commits each decision and emits ``approval_decided``. Then the turn's
calls run (a denied one is answered without running); ``approval_wait`` running out **parks**
the run (:class:`Parked`), which then ends ``awaiting_approval`` with nothing synthesized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from ..agent.approval import Resume, Verdict, needs_approval
from ..agent.events import AgentEvent
from ..agent.loop import AgentRun, Loop
from ..agent.options import AgentOptions
from ..ai.messages import Message, ToolCall
from ..session.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    AwaitingTurn,
    decision_entry_id,
)
from ..session.entries import Entry
from ..session.errors import EntryConflictError
from ..session.ids import quoted
from .errors import ApprovalNotPendingError, PersistError
from .inbox import Inbox, QueuedDecision, QueuedMessage
from .persist import CommitEffects

__all__ = [
    "ApprovalGate",
    "RunSide",
    "RunStatus",
    "deliver",
    "deliver_held",
    "LocalGate",
    "Parked",
    "Waiting",
    "ask_people",
    "not_pending",
    "record_asked",
    "resume_turn",
    "settle",
]


RunStatus = Literal[
    "starting",
    "calling_model",
    "running_tools",
    "awaiting_approval",
    "persisting",
    "completed",
    "failed",
    "cancelled",
]


class RunSide(Protocol):
    """What the approval step and deliveries use of the run engine."""

    status: RunStatus
    waiting: Waiting | None
    pending_calls: list[ToolCall]

    async def persist(
        self, entries: Sequence[Entry], what: str, keep: bool = False
    ) -> list[Entry]: ...

    async def emit_agent(
        self, event: AgentEvent, entries: list[Entry] | None = None, leaf: bool = False
    ) -> None: ...

    def checkpoint(self) -> None: ...

    def record_stored(self, entries: Sequence[Entry]) -> list[Entry]: ...

    @property
    def run_id(self) -> str: ...

    @property
    def effects(self) -> CommitEffects: ...

    @property
    def gate(self) -> ApprovalGate | None: ...

    @property
    def inbox(self) -> Inbox: ...


class ApprovalGate(Protocol):
    """Where an executor evaluates approval rules and waits for people."""

    approval_wait: float | None
    """Seconds a run waits for decisions before it parks; ``None``: no limit."""

    async def needs_approval(self, reply: Message) -> list[str]:
        """IDs of the reply's calls a person must decide (predicates run where tools run)."""
        ...

    async def wait(self, ready: Callable[[], bool], seconds: float | None) -> bool:
        """Wait until ``ready()`` (re-checked on every inbox arrival); ``False`` on timeout."""
        ...

    def stored_requests(self) -> list[ApprovalRequest]:
        """The requests the reply's producer stored with it (the Temporal model call), which
        the run records instead of committing them; ``[]`` when it stored none."""
        ...


class Parked(Exception):
    """``approval_wait`` ran out with calls still undecided: the run ends
    ``awaiting_approval``."""


class Waiting:
    """The turn a run waits on: its requests and the decisions stored so far."""

    def __init__(self, turn: AwaitingTurn, before: Waiting | None = None) -> None:
        self.turn = turn
        self.earlier: dict[str, str] = {} if before is None else before.decided()
        """The decision IDs of the run's earlier waits, by call ID: a refusal names them."""

    def decided(self) -> dict[str, str]:
        """The decision ID stored on each call decided in this run's waits, by call ID."""
        return self.earlier | {call_id: d.id for call_id, d in self.turn.decisions.items()}

    def check(self, tool_call_id: str, deciding: bool) -> None:
        """Raise :class:`ApprovalNotPendingError` unless the run waits for this call's
        decision (``deciding``: one is queued already, and it will win). A call of this turn
        waits whatever an earlier wait decided: a model may use a call ID again."""
        if not deciding and tool_call_id in {c.id for c in self.turn.undecided()}:
            return
        raise not_pending(tool_call_id, self.decided().get(tool_call_id))

    def verdicts(self) -> dict[str, Verdict]:
        return {
            call_id: Verdict(d.approved, d.reason, d.args)
            for call_id, d in self.turn.decisions.items()
        }


def _decided(engine: RunSide, tool_call_id: str) -> str | None:
    """The ID of the decision the run stored on ``tool_call_id`` in any of its waits, if any."""
    return None if engine.waiting is None else engine.waiting.decided().get(tool_call_id)


def not_pending(
    tool_call_id: str, decision_id: str | None, where: str = "in this run"
) -> ApprovalNotPendingError:
    if decision_id is None:
        text = f"tool call {quoted(tool_call_id)} is not pending a decision {where}"
    else:
        decided = f"decision entry {decision_id!r}"
        text = f"tool call {quoted(tool_call_id)} is already decided ({decided})"
    return ApprovalNotPendingError(text, tool_call_id=tool_call_id, decision_id=decision_id)


async def record_asked(engine: RunSide) -> list[Entry]:
    """Record the approval requests the reply's producer stored with it (the Temporal model
    call) and emit ``approval_requested``, right after the reply's receipt: they are stored
    whatever comes next, so a cancellation that arrived meanwhile answers the calls after
    them, on the run's one chain. ``[]`` when it stored none."""
    ahead = engine.gate.stored_requests() if engine.gate is not None else []
    if not ahead:
        return []
    stored = engine.record_stored(ahead)
    await engine.emit_agent(AgentEvent(type="approval_requested"), stored)
    return stored


async def ask_people(
    engine: RunSide, run: AgentRun, reply: Message, asked: Sequence[Entry] = ()
) -> None:
    """After a reply is stored: if any of its calls needs approval, request (unless its
    producer did: ``asked``, from :func:`record_asked`) and wait, then hand the loop the
    verdicts before it runs the turn's tools. A decision still queued then is for a call the
    reply did not ask about, taken while the run could not know (run_mail.check_decision)."""
    if engine.gate is not None and engine.pending_calls:
        if asked:
            ask = [e.tool_call_id for e in asked if isinstance(e, ApprovalRequest)]
        else:
            ask = await engine.gate.needs_approval(reply)
        if ask:
            run.verdicts.update(await settle(engine, reply, ask, asked=asked))
    engine.inbox.refuse_decisions(lambda call_id: not_pending(call_id, _decided(engine, call_id)))


async def resume_turn(
    engine: RunSide,
    loop: Loop,
    messages: list[Message],
    turn: AwaitingTurn,
    receipt: list[Entry] | None,
) -> AgentRun:
    """A run started on a stored turn whose calls wait: ``agent_start`` (with ``receipt``,
    unless it went out already: ``None``), the wait for the undecided calls, then a loop run
    that starts from the stored reply and runs its unanswered calls."""
    if receipt is not None:
        await engine.emit_agent(AgentEvent(type="agent_start"), receipt, leaf=True)
        engine.checkpoint()
    engine.pending_calls = turn.unanswered()
    verdicts = await settle(engine, turn.assistant, [], turn)
    run = loop.run(messages, resume=Resume(turn.assistant, list(turn.results)))
    run.verdicts.update(verdicts)
    return run


async def settle(
    engine: RunSide,
    reply: Message,
    ask: list[str],
    turn: AwaitingTurn | None = None,
    asked: Sequence[Entry] = (),
) -> dict[str, Verdict]:
    """Request approval for the calls ``ask`` of ``reply`` (unless its producer did:
    ``asked``, recorded already), or, given ``turn``, wait on the requests a stored turn
    holds; then wait until each is decided. The verdicts by call ID. Raises :class:`Parked`
    when ``approval_wait`` runs out first with no message queued."""
    if turn is None:
        turn = AwaitingTurn(reply, 0)
        stored = list(asked)
        if not stored:
            calls = {c.id: c for c in turn.calls}
            requests = [
                ApprovalRequest(
                    tool_call_id=i,
                    tool_name=calls[i].name,
                    args=calls[i].arguments,
                    run_id=engine.run_id,
                    created_at=engine.effects.now(),
                )
                for i in ask
            ]
            stored = await engine.persist(requests, "persist approval requests")
            await engine.emit_agent(AgentEvent(type="approval_requested"), stored)
        for entry in stored:
            assert isinstance(entry, ApprovalRequest)
            turn.requests[entry.tool_call_id] = entry
    waiting = engine.waiting = Waiting(turn, engine.waiting)
    previous, engine.status = engine.status, "awaiting_approval"
    try:
        await _wait_for_decisions(engine, waiting)
    finally:
        engine.status = previous
    return waiting.verdicts()


async def _wait_for_decisions(engine: RunSide, waiting: Waiting) -> None:
    gate, inbox = engine.gate, engine.inbox
    assert gate is not None
    limit = gate.approval_wait
    start = engine.effects.now()
    while waiting.turn.undecided():
        if not inbox.decisions:
            left = None
            if limit is not None and not inbox.messages:
                left = max(0.0, limit - (engine.effects.now() - start).total_seconds())
            # a run holding a message does not park: an accepted message is always delivered,
            # after the decisions (docs/design.md#approvals-and-steering)
            if not await gate.wait(lambda: bool(inbox.decisions), left) and not inbox.messages:
                raise Parked()
        for queued in inbox.take_decisions():
            await _commit_decision(engine, waiting, queued)


async def _commit_decision(engine: RunSide, waiting: Waiting, queued: QueuedDecision) -> None:
    decision = queued.decision
    request = waiting.turn.requests.get(decision.tool_call_id)
    if request is None or decision.tool_call_id in waiting.turn.decisions:
        decided = waiting.decided().get(decision.tool_call_id)
        queued.done.set_exception(not_pending(decision.tool_call_id, decided))
        return
    entry = decision.model_copy(
        update={"id": decision_entry_id(request.id), "created_at": engine.effects.now()}
    )
    try:
        stored = await engine.persist([entry], "persist approval decision", keep=True)
    except PersistError as exc:
        if not _conflict(exc):
            queued.done.set_exception(exc)
            raise
        # another process stored a decision on this request first: it won (the run sees it
        # when the next run loads the session; this one parks if nothing else decides)
        queued.done.set_exception(not_pending(decision.tool_call_id, entry.id))
        return
    stored_decision = stored[0]
    assert isinstance(stored_decision, ApprovalDecision)
    waiting.turn.decisions[decision.tool_call_id] = stored_decision
    await engine.emit_agent(AgentEvent(type="approval_decided"), stored)
    queued.done.set_result(stored_decision)


def _conflict(exc: PersistError) -> bool:
    cause = exc.__cause__
    if isinstance(cause, EntryConflictError):
        return True
    return cause is not None and getattr(cause, "kind", None) == EntryConflictError.__name__


class LocalGate:
    """The in-process gate: rules evaluated here, an asyncio wait woken by inbox arrivals."""

    def __init__(self, options: AgentOptions, inbox: Inbox) -> None:
        self.approval_wait = options.approval_wait
        self._options = options
        self._wake = asyncio.Event()
        inbox.on_change = self._wake.set

    def stored_requests(self) -> list[ApprovalRequest]:
        return []

    async def needs_approval(self, reply: Message) -> list[str]:
        options = self._options
        return await needs_approval(reply.tool_calls(), options.tools, options.approval)

    async def wait(self, ready: Callable[[], bool], seconds: float | None) -> bool:
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        while not ready():
            self._wake.clear()
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return ready()
        return True


async def deliver(engine: RunSide, would_continue: bool, last: bool = True) -> list[Message]:
    """The loop's inbox (:class:`~durable_agent.agent.loop.Inbox`): store the messages due at
    this turn's end, each emitted as ``input_delivered`` (docs/design.md#approvals-and-steering).
    What a cancellation or a failure cuts off goes back to the inbox: a cancelled run stores it,
    a failed one refuses it."""
    due = engine.inbox.due(would_continue, last)
    for i, queued in enumerate(due):
        try:
            await store_delivered(engine, queued)
            engine.checkpoint()
        except BaseException:
            engine.inbox.requeue(due[i:])
            raise
    return [q.entry.message for q in due]


async def deliver_held(engine: RunSide) -> None:
    """A cancelled run's queued messages, after its cancellation results: each stored and
    emitted as ``input_delivered``, in the order received, with no model call after them (the
    next run answers them). An accepted message is always delivered."""
    held = engine.inbox.take_messages()
    for i, queued in enumerate(held):
        try:
            await store_delivered(engine, queued)
        except BaseException:
            engine.inbox.requeue(held[i:])
            raise


async def store_delivered(engine: RunSide, queued: QueuedMessage) -> None:
    """Store one message sent into the run, emit its ``input_delivered`` and answer its sender
    (a message not stored is left unanswered, for whoever takes it next)."""
    entry = queued.entry.model_copy(update={"created_at": engine.effects.now()})
    try:
        receipt = await engine.persist([entry], "persist delivered input")
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        queued.done.set_exception(exc)
        raise
    try:
        await engine.emit_agent(AgentEvent(type="input_delivered"), receipt)
    finally:
        queued.done.set_result(receipt[0])
