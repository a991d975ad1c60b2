"""A run's events, derived from the entries it stored: what a client that follows the store shows.

The run engine's event order (docs/design.md#receipts) is a function of the run's chain of stored
entries, so a client that reads the session's new entries in append order can emit the events
the engine records, without asking the workflow: :class:`RunChain` is that function, fed the
session's entries as they are read (it ignores those that are not the run's), the news that a
reply started streaming, and the run's outcome. It does no I/O and reads no clock.

**Which entries are the run's.** The run's first batch (run-start repairs, then its durable
inputs, whose IDs the client chose) hangs off the run's starting leaf; every later entry of the
run is the first entry in append order that hangs off the run's current leaf *and* has the shape
the run expects there: an assistant reply after the input or a turn's last result, the result of
the next unanswered call after a reply with calls. Another writer's entry under the same leaf (a
user message of a second handle, say) has another shape and is passed over. The run's own
account (``new_entry_ids`` in its result) is checked against :attr:`RunChain.ids` at the end.

**When each event goes out** (each as the engine records it, in its order):
- ``agent_start`` with the first batch's receipt, and with it the first turn's ``turn_start`` and
  assistant ``message_start`` (the workflow schedules the model call in the same step);
- a later turn's ``turn_start`` and ``message_start`` once its reply shows: a live delta of it
  (:meth:`RunChain.reply_started`), its entry, or the run's end; a run that stops at its turn
  limit starts no turn, which only the end tells;
- ``message_end`` with the one-entry receipt when the reply is stored, then for a reply without
  calls ``turn_end``; a lone call's ``tool_execution_start`` right after (it is scheduled with
  the reply's receipt); each result's ``tool_execution_end``, ``message_start`` and
  ``message_end`` when it is stored, the next sequential call's start right after it, and
  ``turn_end`` after the last. A turn with several calls runs them in parallel (one stored
  batch, one ``created_at``) or one after another; which, the results tell: the starts then go
  out with the first result (all of them for a parallel batch, as the engine records them);
- ``agent_end`` (the ``message_end`` messages, the run's usage) when the run completed.

A cancelled run's own entries have their own shape: a reply cut short (``stop_reason="aborted"``)
gets no ``turn_end``, and each ``tool execution cancelled`` result only ``message_start`` and
``message_end`` (a turn of several calls cancelled before any result counts as parallel, the
default: one of sequential calls shows only its first call started then). A tool result over
the payload limit fails the run at the end of its turn, so its turn gets no ``turn_end``
either.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from ..agent.events import AgentEvent
from ..ai.messages import Message, ToolCall, Usage
from ..session.entries import Entry, MessageEntry
from .engine import CANCELLED_TEXT
from .events import Event

__all__ = ["Outcome", "RunChain"]

Outcome = Literal["completed", "failed", "cancelled"]

TOO_LARGE = "tool execution failed: PayloadTooLargeError:"
"""How a result over the payload limit reads (the run then fails at the end of its turn)."""

Phase = Literal["input", "reply", "tools", "ended"]


def _parent(entry: Entry) -> str:
    return entry.parent_id or ""


def _cancelled(message: Message) -> bool:
    return message.is_error and message.text() == CANCELLED_TEXT


class RunChain:
    """The events of one run, derived from its stored entries (module doc).

    ``inputs`` are the IDs of the run's durable inputs in order (``None`` for one the client
    does not know: an operator's input the run stamped); ``repairs`` how many run-start repairs
    the run stores first when ``inputs`` is empty (a client computes them from the path, as the
    run does)."""

    def __init__(
        self,
        session_id: str,
        start_leaf: str,
        inputs: Sequence[str | None],
        repairs: int = 0,
    ) -> None:
        self.session_id = session_id
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

    # -- what a follower asks ------------------------------------------------------------------

    @property
    def reply_turn(self) -> int | None:
        """The turn whose reply the run awaits now (its live deltas are keyed by it), else
        ``None`` (before the input is stored, while tools run, after the last turn)."""
        awaiting = self._phase == "reply" or (self._phase == "input" and self._empty_batch())
        return self.turn + 1 if awaiting else None

    def add(self, entries: Iterable[Entry]) -> list[Event]:
        """The events that the run's entries among ``entries`` (read in append order) give."""
        out: list[Event] = []
        pending = list(entries)
        i = 0
        while i < len(pending):
            entry = pending[i]
            i += 1
            if _parent(entry) != self.leaf:
                continue
            if self._phase == "input" and self._empty_batch():
                out += self._open()  # nothing stored first: the reply opens the run
            if self._phase == "input":
                out += self._input(entry)
            elif self._phase == "reply":
                out += self._reply_entry(entry)
            elif self._phase == "tools":
                out += self._result(entry, pending[i:])
        return out

    def reply_started(self) -> list[Event]:
        """A live delta of the awaited reply arrived: its ``turn_start``/``message_start``."""
        if self._phase == "input" and self._empty_batch():
            return self._open() + self._begin_turn()
        if self._phase != "reply" or self._started:
            return []
        return self._begin_turn()

    def end(self, outcome: Outcome, usage: Usage | None = None) -> list[Event]:
        """The run ended: the events it recorded after what was stored."""
        out: list[Event] = []
        if self._phase == "input" and self._empty_batch() and outcome != "failed":
            out += self._open()
        if outcome == "completed":
            if self._aborted:
                out.append(self._event(AgentEvent(type="turn_end", message=self._reply)))
            out.append(
                self._event(AgentEvent(type="agent_end", messages=list(self.produced), usage=usage))
            )
        elif self._phase == "reply" and not self._started and not self._aborted:
            out += self._begin_turn()  # the model call was under way when the run stopped
        self._phase = "ended"
        return out

    # -- the first batch -----------------------------------------------------------------------

    def _empty_batch(self) -> bool:
        return not self._inputs and self._repairs == 0

    def _input(self, entry: Entry) -> list[Event]:
        inputs, taken = self._inputs, self._inputs_seen
        want = inputs[taken] if taken < len(inputs) else None
        named = want is not None
        if taken == 0 and _repair(entry) and entry.id != want:
            # before the first input: a run-start repair, unless every repair is seen and an
            # unnamed input comes next (which may read like one)
            if named or self._repairs_seen < self._repairs:
                self._repairs_seen += 1
                self._take(entry)
                return self._maybe_open()
            if not inputs:
                return []  # no input and every repair seen: not this run's
        if taken >= len(inputs) or (named and entry.id != want):
            return []  # not this run's
        return self._input_taken(entry)

    def _input_taken(self, entry: Entry) -> list[Event]:
        self._inputs_seen += 1
        self._take(entry)
        return self._maybe_open()

    def _maybe_open(self) -> list[Event]:
        """The first batch is complete: every input, or (without inputs) every repair."""
        if self._inputs and self._inputs_seen < len(self._inputs):
            return []
        if not self._inputs and self._repairs_seen < self._repairs:
            return []
        return self._open() + self._begin_turn()

    def _take(self, entry: Entry) -> None:
        self._batch.append(entry)
        self.ids.append(entry.id)
        self.leaf = entry.id

    def _open(self) -> list[Event]:
        self._phase = "reply"
        agent_start = AgentEvent(type="agent_start")
        return [self._event(agent_start, entries=list(self._batch), leaf=True)]

    # -- replies -------------------------------------------------------------------------------

    def _begin_turn(self) -> list[Event]:
        self._started = True
        return [
            self._event(AgentEvent(type="turn_start")),
            self._event(AgentEvent(type="message_start", message=Message(role="assistant"))),
        ]

    def _reply_entry(self, entry: Entry) -> list[Event]:
        if not isinstance(entry, MessageEntry) or entry.message.role != "assistant":
            return []
        out = [] if self._started else self._begin_turn()
        reply = entry.message
        out.append(self._receipt(entry))
        self.turn += 1
        self._started = False
        self._reply = reply
        self._aborted = reply.stop_reason == "aborted"
        calls = [c for c in reply.tool_calls() if not c.server]
        self._calls, self._answered, self._starts = calls, 0, 0
        self._parallel = None if len(calls) > 1 else False
        if self._aborted:
            # cut short by a cancellation, whose results follow without tool events; or a
            # provider's own "aborted" reply, whose calls never run and whose turn_end the
            # run's completion brings
            self._cancelling = True
            self._phase = "tools" if calls else "ended"
            return out
        if not calls:
            out.append(self._event(AgentEvent(type="turn_end", message=reply)))
            self._phase = "ended"
            return out
        self._phase = "tools"
        if self._parallel is False:
            out += self._start(0)
        return out

    # -- tool results --------------------------------------------------------------------------

    def _result(self, entry: Entry, following: list[Entry]) -> list[Event]:
        if not isinstance(entry, MessageEntry) or entry.message.role != "tool_result":
            return []
        call = self._calls[self._answered]
        result = entry.message
        if result.tool_call_id != call.id:
            return []
        out: list[Event] = []
        if self._cancelling or _cancelled(result):
            # the cancel path answers every call still open (no tool_execution_end), each call
            # started or not: with no result in yet, a turn's calls ran in parallel (tools are
            # parallel-safe unless they say otherwise), so all of them had started
            if not self._cancelling and self._parallel is None and self._starts == 0:
                out += self._start_all()
            self._cancelling = True
        else:
            if self._parallel is None:
                self._parallel = self._batched(entry, following)
                out += self._start_all() if self._parallel else self._start(0)
            out.append(
                self._event(
                    AgentEvent(
                        type="tool_execution_end",
                        tool_call_id=call.id,
                        tool_name=call.name,
                        result=result,
                        is_error=result.is_error,
                    )
                )
            )
            self._too_large = self._too_large or result.text().startswith(TOO_LARGE)
        out.append(self._event(AgentEvent(type="message_start", message=result)))
        out.append(self._receipt(entry))
        self._answered += 1
        if self._answered < len(self._calls):
            if not self._cancelling and not self._parallel:
                out += self._start(self._answered)
            return out
        return out + self._turn_done()

    def _batched(self, entry: Entry, following: list[Entry]) -> bool:
        """Whether the turn's results are one batch (parallel calls): all of them stored
        together, chained in call order, sharing one ``created_at``."""
        parent, rest = entry.id, self._calls[1:]
        for call in rest:
            nxt = next((e for e in following if _parent(e) == parent), None)
            if not (
                isinstance(nxt, MessageEntry)
                and nxt.message.tool_call_id == call.id
                and nxt.created_at == entry.created_at
            ):
                return False
            parent = nxt.id
        return True

    def _start(self, index: int) -> list[Event]:
        if index < self._starts:
            return []
        self._starts = index + 1
        call = self._calls[index]
        return [
            self._event(
                AgentEvent(
                    type="tool_execution_start",
                    tool_call_id=call.id,
                    tool_name=call.name,
                    args=call.arguments,
                )
            )
        ]

    def _start_all(self) -> list[Event]:
        out: list[Event] = []
        for index in range(self._starts, len(self._calls)):
            out += self._start(index)
        return out

    def _turn_done(self) -> list[Event]:
        reply = self._reply
        assert reply is not None
        if self._cancelling or self._too_large:
            self._phase = "ended"  # the run ends here: cancelled, or failed at this turn_end
            return []
        self._phase = "reply" if reply.stop_reason != "error" else "ended"
        return [self._event(AgentEvent(type="turn_end", message=reply))]

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


def _repair(entry: Entry) -> bool:
    """A run-start repair: a synthetic tool result (docs/design.md#repair-and-reconcile)."""
    return isinstance(entry, MessageEntry) and entry.synthetic
