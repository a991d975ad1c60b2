"""Message bodies left out of recorded events, and put back from the store.

A run's recorded events repeat its messages: a 600 KB tool result is in ``tool_execution_end``,
in the result's ``message_start`` and twice in its ``message_end`` (the message and the receipt).
Carrying those events across continue-as-new, or answering them in one ``events(after)`` query,
would exceed Temporal's 2 MB payload limit well below the documented message limit
(docs/design.md#bounded-history).

Every such body is a stored entry's message, so an event can name the entry instead
(:class:`~durable_agent.activities.contracts.BodyRefs`): the workflow records which entry each body
is once the receipt is in (:class:`BodyTracker`), sends or carries an event without its bodies
when it is large (:func:`slim_sized`), and a reader of the query (a test comparing a client's events
with the recorded ones) reads the named entries from the store and puts the bodies back.
"""

from __future__ import annotations

from ..activities.contracts import BodyRefs, WireEvent
from ..agent.events import AgentEvent

__all__ = [
    "CARRY_INLINE_LIMIT",
    "QUERY_INLINE_LIMIT",
    "BodyTracker",
    "SlimCache",
    "carried",
    "encoded_size",
    "last_turns",
    "slim_sized",
]

QUERY_INLINE_LIMIT = 256 * 1024
"""An event whose encoding is larger goes out of a query answer without its bodies."""

CARRY_INLINE_LIMIT = 1024
"""An event carried across continue-as-new keeps its bodies only up to this size."""


def encoded_size(wire: WireEvent) -> int:
    """The event's size as the payload converter writes it (UTF-8 JSON bytes)."""
    return len(wire.model_dump_json().encode("utf-8"))


class BodyTracker:
    """Names the stored entry of each recorded body, as receipts come in (workflow side).

    ``refs`` are attached to the recorded event itself (a copy with ``refs`` set), so what
    continue-as-new carries and what a query answers are functions of the recorded events only.
    """

    def __init__(self) -> None:
        self._awaiting: list[int] = []
        """Indexes (into the event list) of events whose message or result awaits its receipt."""
        self._assistant: str | None = None
        """The entry ID of the last stored assistant message (where tool-call args live)."""

    def record(self, events: list[WireEvent], wire: WireEvent, entry_ids: list[str] | None) -> None:
        """Append ``wire`` to ``events``, naming the entries of its bodies where known
        (``entry_ids``: the IDs of its receipt, if it is one)."""
        agent = wire.agent
        refs = BodyRefs() if entry_ids is None else BodyRefs(entry_ids=list(entry_ids))
        if agent is not None:
            if agent.type == "message_end" and entry_ids:
                refs = refs.model_copy(update={"message": entry_ids[0]})
                self._receipt(events, agent, entry_ids[0])
            elif agent.type == "turn_end" and agent.message is not None and self._assistant:
                refs = refs.model_copy(update={"message": self._assistant})
            elif agent.type == "tool_execution_start" and agent.args and self._assistant:
                refs = refs.model_copy(update={"args": self._assistant})
            elif agent.message is not None or agent.result is not None or agent.input:
                self._awaiting.append(len(events))
            if agent.type in ("turn_end", "agent_end"):
                # what is still unnamed at the turn's end is never stored (the original of a
                # result the store refused, a reply's empty start): it travels inline or not
                self._awaiting = []
        events.append(wire if refs == BodyRefs() else wire.model_copy(update={"refs": refs}))

    def _receipt(self, events: list[WireEvent], agent: AgentEvent, entry_id: str) -> None:
        """Name ``entry_id`` in the earlier events of the turn that repeat its message."""
        message = agent.message
        assert message is not None
        if message.role == "assistant":
            self._assistant = entry_id
        still: list[int] = []
        for i in self._awaiting:
            earlier = events[i]
            inner = earlier.agent
            assert inner is not None
            old = earlier.refs or BodyRefs()
            update: dict[str, object] = {}
            if inner.message is not None and old.message is None and inner.message == message:
                update["message"] = entry_id
            if inner.result is not None and old.result is None and inner.result == message:
                update["result"] = entry_id
            names = list(old.input or [])
            if inner.input and len(names) < len(inner.input) and message in inner.input:
                update["input"] = names = [*names, entry_id]
            if update:
                old = old.model_copy(update=update)
                events[i] = earlier.model_copy(update={"refs": old})
            named = (
                (inner.message is None or old.message is not None)
                and (inner.result is None or old.result is not None)
                and len(names) == len(inner.input or ())
            )
            if not named:
                still.append(i)
        self._awaiting = still

    def pending(self, index: int) -> bool:
        """The event at ``index`` has a body whose receipt is not recorded yet."""
        return index in self._awaiting


def slim_sized(
    wire: WireEvent, inline_limit: int, *, force: bool = False
) -> tuple[WireEvent, int] | None:
    """``wire`` itself if its encoding fits ``inline_limit``, else a copy without every body
    whose entry ``refs`` names; ``None`` if a body that keeps it too large has no name yet. With
    the encoded size of what it returns (measured on the way, once).

    ``force`` leaves such an unnamed body out too (an event whose body will never be stored,
    such as the original of a result the store refused and answered with a stand-in): the
    answer stays within its budget at the cost of that one body."""
    size = encoded_size(wire)
    if size <= inline_limit:
        return wire, size
    refs, agent = wire.refs or BodyRefs(), wire.agent
    update: dict[str, object] = {}
    if refs.entry_ids is not None or force:
        update["entries"] = None
    if agent is not None:
        inner: dict[str, object] = {}
        for name in ("message", "result", "args"):
            if getattr(refs, name) is not None or force:
                inner[name] = None
        if force or (refs.input is not None and len(refs.input) == len(agent.input or ())):
            inner["input"] = None
        if inner:
            update["agent"] = agent.model_copy(update=inner)
    out = wire.model_copy(update=update)
    size = encoded_size(out)
    if not force and size > inline_limit:
        return None
    return out, size


class SlimCache:
    """What a query sends for each recorded event, and its size, worked out once per event.

    The client queries ``events(after)`` on every poll, and encoding each answered event twice
    (to measure it, then to measure its slim form) was most of a query's cost on the worker. A
    recorded event never changes in place (a receipt replaces it with a copy), so an answer is
    kept while the same event object sits at its position with the same ``force``."""

    def __init__(self, inline_limit: int) -> None:
        self._inline_limit = inline_limit
        self._by_position: dict[int, tuple[WireEvent, bool, WireEvent, int]] = {}

    def sized(self, wire: WireEvent, *, force: bool) -> tuple[WireEvent, int] | None:
        """:func:`slim_sized` of ``wire``, from the cache when ``wire`` was answered before."""
        hit = self._by_position.get(wire.position)
        if hit is not None and hit[0] is wire and hit[1] == force:
            return hit[2], hit[3]
        sized = slim_sized(wire, self._inline_limit, force=force)
        if sized is not None:
            self._by_position[wire.position] = (wire, force, *sized)
        return sized


def carried(events: list[WireEvent]) -> list[WireEvent]:
    """``events`` as continue-as-new carries them: every body over a few hundred bytes left out
    (all of them are stored by the turn boundary), so the carried input is bounded."""
    out = []
    for wire in events:
        sent = slim_sized(wire, CARRY_INLINE_LIMIT, force=True)
        assert sent is not None
        out.append(sent[0])
    return out


def last_turns(events: list[WireEvent], turns: int) -> list[WireEvent]:
    """The events since the ``turns``-th last ``turn_start`` (what continue-as-new carries)."""
    seen = 0
    for i in range(len(events) - 1, -1, -1):
        agent = events[i].agent
        if agent is not None and agent.type == "turn_start":
            seen += 1
            if seen == turns:
                return events[i:]
    return events[-50 * turns :] if seen == 0 else events
