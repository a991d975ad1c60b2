"""The state of a :class:`~.chain_events.RunChain` and the steps it shares: events, receipts,
tool starts, and what people add to a run (docs/design.md#approvals-and-steering).

Split from :mod:`.chain_events` so each module stays one readable size; the derivation rules
are described there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..agent.approval import Verdict
from ..agent.events import AgentEvent, tool_start
from ..ai.messages import Message, ToolCall
from ..session.approvals import ApprovalDecision, AwaitingTurn
from ..session.entries import Entry, MessageEntry
from .events import Event

__all__ = ["ChainSteps", "Phase"]

Phase = Literal["input", "reply", "tools", "ended"]


class ChainSteps:
    """A run chain's state and its shared steps (the derivation is :class:`RunChain`)."""

    def __init__(
        self,
        session_id: str,
        start_leaf: str,
        inputs: Sequence[str | None],
        repairs: int = 0,
        waiting: AwaitingTurn | None = None,
    ) -> None:
        self.session_id = session_id
        self._waiting = waiting
        """A run started on a stored turn whose calls wait for people (see :meth:`begin`)."""
        self._awaiting: set[str] = set()
        """Calls of this turn still waiting for a decision (their starts wait too)."""
        self.leaf = start_leaf
        self.ids: list[str] = []
        """The run's entries so far, in store order."""
        self.produced: list[Message] = []
        """The messages of the ``message_end`` receipts."""
        self.turn = 0
        """Replies stored so far; the reply the run awaits is turn ``turn + 1``."""
        self._inputs = list(inputs)
        self._inputs_seen = 0
        self._repairs = repairs
        self._repairs_seen = 0
        self._batch: list[Entry] = []
        self._phase: Phase = "input"
        self._started = False
        """The awaited reply's ``turn_start``/``message_start`` went out."""
        self._reply: Message | None = None
        self._calls: list[ToolCall] = []
        self._answered = 0
        self._parallel: bool | None = None
        self._starts = 0
        """Calls of this turn whose ``tool_execution_start`` went out."""
        self._cancelling = False
        self._too_large = False
        self._aborted = False
        """The last reply was cut short (its ``turn_end`` waits for the run's end)."""

    def begin(self) -> list[Event]:
        """What the run emits before it stores anything: for a run started on a turn whose
        calls wait (no input), its ``agent_start`` (it goes out before the wait)."""
        turn = self._waiting
        if turn is None:
            return []
        self._phase = "tools"
        self._reply = turn.assistant
        self._calls, self._answered = turn.unanswered(), 0
        for decision in turn.decisions.values():
            self._edit(decision)
        self._parallel = None if len(self._calls) > 1 else False
        out = [self._event(AgentEvent(type="agent_start"), entries=[], leaf=True)]
        return out + self._await({c.id for c in turn.undecided()})

    # -- people ----------------------------------------------------------------------------------

    def _await(self, undecided: set[str]) -> list[Event]:
        """Wait for decisions on ``undecided``; no call starts before the last (a cancel then
        answers the calls without starts)."""
        self._awaiting = undecided
        if undecided:
            self._starts = len(self._calls)
            return []
        return self._start(0) if self._parallel is False else []

    def _decided(self, entry: ApprovalDecision) -> list[Event]:
        if entry.tool_call_id not in self._awaiting:
            return []
        self.ids.append(entry.id)
        self.leaf = entry.id
        out = [self._event(AgentEvent(type="approval_decided"), entries=[entry], leaf=True)]
        self._awaiting.discard(entry.tool_call_id)
        self._edit(entry)
        if not self._awaiting:
            self._starts = 0
            out += self._await(set())
        return out

    def _edit(self, decision: ApprovalDecision) -> None:
        """An approval with edited arguments: the call starts with them, as the engine runs it
        (its ``tool_execution_start`` carries what the tool is handed, not the model's)."""
        if decision.approved and decision.args is not None:
            self._calls = [
                Verdict(True, args=decision.args).apply(c) if c.id == decision.tool_call_id else c
                for c in self._calls
            ]

    def _delivered(self, entry: Entry) -> list[Event]:
        """A message sent into the run, stored after a turn's end: a model call follows; or
        after a cancellation's results, which the run stores as its last entries."""
        self.ids.append(entry.id)
        self.leaf = entry.id
        if not self._cancelling:
            self._phase = "reply"
        return [self._event(AgentEvent(type="input_delivered"), entries=[entry], leaf=True)]

    # -- tool starts ----------------------------------------------------------------------------

    def _start(self, index: int) -> list[Event]:
        if index < self._starts:
            return []
        self._starts = index + 1
        call = self._calls[index]
        return [self._event(tool_start(call))]

    def _start_all(self) -> list[Event]:
        out: list[Event] = []
        for index in range(self._starts, len(self._calls)):
            out += self._start(index)
        return out

    # -- events --------------------------------------------------------------------------------

    def _receipt(self, entry: MessageEntry) -> Event:
        self.ids.append(entry.id)
        self.leaf = entry.id
        self.produced.append(entry.message)
        end = AgentEvent(type="message_end", message=entry.message)
        return self._event(end, entries=[entry], leaf=True)

    def _event(
        self, inner: AgentEvent, *, entries: list[Entry] | None = None, leaf: bool = False
    ) -> Event:
        return Event(
            type="agent",
            session_id=self.session_id,
            agent=inner,
            entries=entries,
            leaf_id=self.leaf if leaf else None,
        )
