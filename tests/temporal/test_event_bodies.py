"""Bodies left out of recorded events are put back exactly: a turn with a
hook-injected input, a large reply with tool calls, and two results whose ends interleave."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_agent.activities.contracts import WireEvent, event_to_wire
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent, ToolCall
from durable_agent.durable.events import Event
from durable_agent.session import Entry, MessageEntry
from durable_agent.workflows.event_bodies import (
    CARRY_INLINE_LIMIT,
    QUERY_INLINE_LIMIT,
    BodyTracker,
    SlimCache,
    carried,
    encoded_size,
    slim_sized,
)
from tests.temporal.helpers import hydrate

BIG = 300_000
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _text(role: str, text: str, **fields: object) -> Message:
    return Message(role=role, content=[TextContent(text=text)], **fields)


def _turn() -> tuple[list[tuple[AgentEvent, Entry | None]], dict[str, Entry]]:
    nudge = _text("user", "n" * BIG)
    calls = [
        ToolCall(id="c1", name="t", arguments={"blob": "a" * BIG}),
        ToolCall(id="c2", name="t", arguments={"blob": "b"}),
    ]
    reply = Message(role="assistant", content=[TextContent(text="r" * BIG), *calls])
    r1 = _text("tool_result", "1" * BIG, tool_call_id="c1", tool_name="t")
    r2 = _text("tool_result", "2" * BIG, tool_call_id="c2", tool_name="t")
    entries = {
        m_id: MessageEntry(id=m_id, message=m, created_at=NOW)
        for m_id, m in [("e-nudge", nudge), ("e-reply", reply), ("e-r1", r1), ("e-r2", r2)]
    }
    e = entries
    steps: list[tuple[AgentEvent, Entry | None]] = [
        (AgentEvent(type="turn_start", input=[nudge]), None),
        (AgentEvent(type="message_start", message=nudge), None),
        (AgentEvent(type="message_end", message=nudge), e["e-nudge"]),
        (AgentEvent(type="message_start", message=Message(role="assistant")), None),
        (AgentEvent(type="message_end", message=reply), e["e-reply"]),
        *[
            (
                AgentEvent(
                    type="tool_execution_start", tool_call_id=c.id, tool_name="t", args=c.arguments
                ),
                None,
            )
            for c in calls
        ],
        (AgentEvent(type="tool_execution_end", tool_call_id="c1", tool_name="t", result=r1), None),
        (AgentEvent(type="tool_execution_end", tool_call_id="c2", tool_name="t", result=r2), None),
        (AgentEvent(type="message_start", message=r1), None),
        (AgentEvent(type="message_end", message=r1), e["e-r1"]),
        (AgentEvent(type="message_start", message=r2), None),
        (AgentEvent(type="message_end", message=r2), e["e-r2"]),
        (AgentEvent(type="turn_end", message=reply), None),
    ]
    return steps, dict(entries)


def _record(
    upto: int | None = None,
) -> tuple[list[WireEvent], list[Event], BodyTracker, dict[str, Entry]]:
    """The turn's first ``upto`` events (all by default) as the workflow records them."""
    steps, entries = _turn()
    steps = steps[:upto]
    events: list[WireEvent] = []
    originals: list[Event] = []
    tracker = BodyTracker()
    for position, (agent, entry) in enumerate(steps, start=1):
        event = Event(
            type="agent",
            session_id="s",
            agent=agent,
            entries=None if entry is None else [entry],
            leaf_id=None if entry is None else entry.id,
        )
        originals.append(event)
        ids = None if entry is None else [entry.id]
        tracker.record(events, event_to_wire(event, position), ids)
    return events, originals, tracker, entries


def test_every_body_is_named_by_the_turn_end_and_comes_back_whole() -> None:
    events, originals, tracker, entries = _record()
    assert not any(tracker.pending(i) for i in range(len(events)))
    sent = [slim_sized(e, QUERY_INLINE_LIMIT) for e in events]
    assert all(s is not None and encoded_size(s[0]) < 2_000 for s in sent)  # every one slimmed
    assert [hydrate(s[0], entries) for s in sent if s is not None] == originals
    carry = carried(events)
    assert sum(encoded_size(e) for e in carry) < 15 * CARRY_INLINE_LIMIT
    assert [hydrate(e, entries) for e in carry] == originals


def test_a_result_waits_for_its_receipt_before_it_is_sent() -> None:
    events, _, tracker, _ = _record(upto=8)  # up to the end of call c1, its result not stored
    last = len(events) - 1
    assert tracker.pending(last)
    assert slim_sized(events[last], QUERY_INLINE_LIMIT) is None  # too large to send whole


def test_slim_sized_measures_exactly_what_it_returns() -> None:
    events, _, tracker, _ = _record()
    for wire in events:
        for force in (False, True):
            sized = slim_sized(wire, QUERY_INLINE_LIMIT, force=force)
            if sized is not None:
                assert sized[1] == encoded_size(sized[0])
    assert not tracker.pending(0)


def test_the_query_cache_answers_a_recorded_event_again_until_it_is_replaced() -> None:
    # the turn up to c1's result (not stored yet), then the same turn once its receipt is in:
    # BodyTracker replaces the waiting event with a copy naming the entry, so the cache must
    # measure the copy afresh, and an event answered with another ``force`` too
    early, _, early_tracker, _ = _record(upto=8)
    cache = SlimCache(QUERY_INLINE_LIMIT)
    waiting = len(early) - 1
    assert early_tracker.pending(waiting)
    assert cache.sized(early[waiting], force=False) is None  # its body has no name yet
    forced = cache.sized(early[waiting], force=True)
    assert forced is not None and forced[1] < 2_000  # without the body
    again = cache.sized(early[waiting], force=True)
    assert again is not None and again[0] is forced[0]  # kept, not slimmed again
    assert cache.sized(early[waiting], force=False) is None  # another question, answered anew

    later, _, tracker, _ = _record()
    for i, wire in enumerate(later):
        want = slim_sized(wire, QUERY_INLINE_LIMIT, force=not tracker.pending(i))
        assert cache.sized(wire, force=not tracker.pending(i)) == want  # the copy, measured
        assert (want is not None and want[0].refs is not None) or encoded_size(wire) < 2_000
