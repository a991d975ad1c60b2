"""A live run's inbox: what people hand a run while it works, delivered by the run itself.

Two kinds of mail (docs/design.md#approvals-and-steering):
- **decisions** on the calls the run waits for: the run commits each one (so every commit of a
  run stays serialized through its engine and its leaf) and answers the decider with the stored
  entry;
- **messages**: a steer (``next_turn``) is stored after the current turn's tool results, before
  the next model call; a follow-up (``at_end``) when the loop would stop. Each is stored as an
  ordinary user message and emitted as ``input_delivered``. An accepted message is always
  delivered: the inbox stops accepting at the moment the loop finds it empty and would stop,
  and a run cancelled while it holds messages stores them after its cancellation results.

The inbox does no I/O: callers get a future that the run resolves once the entry is stored (by
:func:`~.approvals.deliver`, the loop's inbox callback, or by the approval step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..session.approvals import ApprovalDecision
from ..session.entries import Entry, MessageEntry
from ..session.ids import quoted
from .errors import ApprovalNotPendingError, RunNotAcceptingError

__all__ = [
    "MAX_QUEUED",
    "Inbox",
    "QueuedDecision",
    "QueuedMessage",
    "When",
]

When = Literal["next_turn", "at_end"]

MAX_QUEUED = 16
"""Messages a run holds at most before it refuses more."""


@dataclass
class QueuedMessage:
    entry: MessageEntry
    when: When
    done: asyncio.Future[Entry]


@dataclass
class QueuedDecision:
    decision: ApprovalDecision
    done: asyncio.Future[Entry]


class Inbox:
    """Queued decisions and messages of one live run (read by its ``state()`` too)."""

    def __init__(self) -> None:
        self.messages: list[QueuedMessage] = []
        self.decisions: list[QueuedDecision] = []
        self.closed_because: str | None = None
        """Why the run takes no more messages (``None`` while it does)."""
        self.on_change: Callable[[], None] = lambda: None
        """Called on every arrival (an in-process wait wakes up on it)."""

    # -- arrivals ----------------------------------------------------------------------------

    def check_message(self) -> None:
        """Raise :class:`RunNotAcceptingError` if a message would be refused now."""
        if self.closed_because is not None:
            raise RunNotAcceptingError(f"the run takes no more messages: {self.closed_because}")
        if len(self.messages) >= MAX_QUEUED:
            raise RunNotAcceptingError(
                f"the run already holds {MAX_QUEUED} queued messages: start a new run instead"
            )

    def send(self, entry: MessageEntry, when: When) -> asyncio.Future[Entry]:
        """Queue a message; the future gets its stored entry once delivered."""
        self.check_message()
        done: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self.messages.append(QueuedMessage(entry, when, done))
        self.on_change()
        return done

    def decide(self, decision: ApprovalDecision) -> asyncio.Future[Entry]:
        """Queue a decision (the run checked it is pending); the future gets the stored entry.
        A closed inbox refuses it at once, as the ``decide`` update's validator does: nothing
        would take it (a cancelled run answers its calls ``cancelled``)."""
        if self.closed_because is not None:
            raise ApprovalNotPendingError(
                f"tool call {quoted(decision.tool_call_id)} is not pending a decision in this run: "
                f"it takes no more ({self.closed_because})",
                tool_call_id=decision.tool_call_id,
            )
        done: asyncio.Future[Entry] = asyncio.get_running_loop().create_future()
        self.decisions.append(QueuedDecision(decision, done))
        self.on_change()
        return done

    def deciding(self, tool_call_id: str) -> bool:
        """A decision on the call is queued (not committed yet)."""
        return any(q.decision.tool_call_id == tool_call_id for q in self.decisions)

    # -- the run's side ----------------------------------------------------------------------

    def take_decisions(self) -> list[QueuedDecision]:
        taken, self.decisions = self.decisions, []
        return taken

    def refuse_decisions(self, refusal: Callable[[str], BaseException]) -> None:
        """Fail every queued decision with ``refusal(tool_call_id)``."""
        for queued in self.take_decisions():
            queued.done.set_exception(refusal(queued.decision.tool_call_id))

    def take_messages(self) -> list[QueuedMessage]:
        """Every queued message, in the order received (a cancelled run stores them all)."""
        taken, self.messages = self.messages, []
        return taken

    def requeue(self, undelivered: list[QueuedMessage]) -> None:
        """Put back, ahead of later arrivals, messages taken but not stored (their delivery was
        cut by a cancellation, which then stores them)."""
        self.messages[:0] = [q for q in undelivered if not q.done.done()]

    def due(self, would_continue: bool, last: bool = True) -> list[QueuedMessage]:
        """The messages to deliver at a turn's end, in the order received: steers always,
        follow-ups only when the loop would stop. Finding nothing when the loop would stop
        closes the inbox (no await in between, so nothing accepted is left behind), unless it
        is not the ``last`` look (a hook that may go on is asked next)."""
        if would_continue:
            due = [q for q in self.messages if q.when == "next_turn"]
        else:
            due = list(self.messages)
        self.messages = [q for q in self.messages if q not in due]
        if not due and not would_continue and last:
            self.close("it has ended")
        return due

    def close(self, because: str, error: BaseException | None = None) -> None:
        """Accept nothing more; ``error`` fails what is still queued (a run that parked or failed
        before delivering it; a cancelled run's decisions, its messages being stored first)."""
        if self.closed_because is None:
            self.closed_because = because
        if error is None:
            return
        futures = [q.done for q in self.messages] + [q.done for q in self.decisions]
        for done in futures:
            if not done.done():
                done.set_exception(error)
        self.messages, self.decisions = [], []
