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
  (:meth:`RunChain.reply_started`; the follower reads the store first, so that a message the
  run stored before it called the model goes out ahead), its entry, or the run's end; a run
  that stops at its turn limit starts no turn, which only the end tells;
- ``message_end`` with the one-entry receipt when the reply is stored, then for a reply without
  calls ``turn_end``; a lone call's ``tool_execution_start`` right after (it is scheduled with
  the reply's receipt); each result's ``tool_execution_end``, ``message_start`` and
  ``message_end`` when it is stored, the next sequential call's start right after it, and
  ``turn_end`` after the last. A turn with several calls runs them in parallel (one stored
  batch, one ``created_at``) or one after another; which, the results tell: the starts then go
  out with the first result (all of them for a parallel batch, as the engine records them);
- ``agent_end`` (the ``message_end`` messages, the run's usage) when the run completed.

A cancelled run's reply cut short (``stop_reason="aborted"``) gets no ``turn_end``, and each
``tool execution cancelled`` result only ``message_start``/``message_end`` (a turn of several
calls cancelled before any result counts as parallel). A tool result over the payload limit fails
the run at the end of its turn (no ``turn_end``). Approval requests stored with a reply give
``approval_requested`` and hold the turn's starts until each call's ``approval_decided``; a user
message after a turn's end is a message sent into the run, ``input_delivered``; so is one after
a cancellation's results (messages the cancelled run held, its last entries). A cancellation
that cut a model call before its reply showed (no live delta, nothing stored) leaves a message it
stored reading like a steer sent before that call: its ``input_delivered`` then goes out ahead of
the call's ``turn_start`` (docs/design.md#approvals-and-steering).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ..agent.events import AgentEvent, tool_end
from ..ai.messages import Message, Usage
from ..session.approvals import ApprovalDecision, requests_after, sent_message
from ..session.entries import Entry, MessageEntry
from .chain_steps import ChainSteps
from .engine import CANCELLED_TEXT
from .events import Event

__all__ = ["Outcome", "RunChain"]

Outcome = Literal["completed", "failed", "cancelled", "parked"]

TOO_LARGE = "tool execution failed: PayloadTooLargeError:"
"""How a result over the payload limit reads (the run then fails at the end of its turn)."""


def _parent(entry: Entry) -> str:
    return entry.parent_id or ""


def _cancelled(message: Message) -> bool:
    return message.is_error and message.text() == CANCELLED_TEXT


class RunChain(ChainSteps):
    """The events of one run, derived from its stored entries (module doc).

    ``inputs`` are the IDs of the run's durable inputs in order (``None`` for one the client
    does not know: an operator's input the run stamped); ``repairs`` how many run-start repairs
    the run stores first when ``inputs`` is empty (a client computes them from the path, as the
    run does)."""

    # -- what a follower asks ------------------------------------------------------------------

    @property
    def reply_turn(self) -> int | None:
        """The turn whose reply the run awaits now (its live deltas are keyed by it), else
        ``None`` (before the input is stored, while tools run, after the last turn)."""
        awaiting = self._phase == "reply" or (self._phase == "input" and self._empty_batch())
        return self.turn + 1 if awaiting else None

    @property
    def tools_running(self) -> bool:
        """The run's tools run now (no call of the turn waits for a person): their results,
        which no live delta announces, are what the run stores next."""
        return self._phase == "tools" and not self._awaiting

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
            elif sent_message(entry) and self._phase in ("reply", "ended"):
                out += self._delivered(entry)
            elif self._phase == "reply":
                out += self._reply_entry(entry, pending[i:])
            elif self._phase == "tools" and isinstance(entry, ApprovalDecision):
                out += self._decided(entry)
            elif self._phase == "tools":
                out += self._result(entry, pending[i:])
        return out

    @property
    def reply_unshown(self) -> bool:
        """Whether a live delta of the awaited reply would start its turn (its ``turn_start``
        has not gone out)."""
        if self._phase == "input":
            return self._empty_batch()
        return self._phase == "reply" and not self._started

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
        if outcome == "parked":
            pass  # the loop was closed while it waited: nothing more is recorded
        elif outcome == "completed":
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

    def _reply_entry(self, entry: Entry, following: list[Entry]) -> list[Event]:
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
        requests = requests_after(entry, following)
        if requests:
            for request in requests:
                self.ids.append(request.id)
                self.leaf = request.id
            asked = AgentEvent(type="approval_requested")
            out.append(self._event(asked, entries=list(requests), leaf=True))
            return out + self._await({r.tool_call_id for r in requests})
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
            out.append(self._event(tool_end(call, result)))
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

    def _turn_done(self) -> list[Event]:
        reply = self._reply
        assert reply is not None
        if self._cancelling or self._too_large:
            self._phase = "ended"  # the run ends here: cancelled, or failed at this turn_end
            return []
        self._phase = "reply" if reply.stop_reason != "error" else "ended"
        return [self._event(AgentEvent(type="turn_end", message=reply))]


def _repair(entry: Entry) -> bool:
    """A run-start repair: a synthetic tool result (docs/design.md#repair-and-reconcile)."""
    return isinstance(entry, MessageEntry) and entry.synthetic
