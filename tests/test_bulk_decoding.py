"""``bulk_decoding``: the garbage collector around a store's decode of a whole session.

A large decode's objects go to the oldest generation unvisited (no collection pass right after
the load walks them); a small one leaves the collector as it is; objects the application froze
stay frozen; a collector the application disabled stays disabled.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent
from durable_agent.session import Entry, MessageEntry, decode_entry, encode_entry
from durable_agent.session.codec import bulk_decoding

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def wires(n: int) -> list[str]:
    message = Message(role="user", content=[TextContent(text="hello")], timestamp=T0)
    return [
        encode_entry(MessageEntry(id=f"e{i}", created_at=T0, message=message)) for i in range(n)
    ]


@pytest.fixture
def passes() -> Iterator[list[int]]:
    """The generations of the collection passes that start while the test holds it."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)


def decode_all(lines: list[str]) -> list[Entry]:
    with bulk_decoding():
        return [decode_entry(line) for line in lines]


@pytest.mark.skipif(
    sys.version_info[:2] == (3, 12),
    reason="Python 3.12 starts with frozen objects, which bulk_decoding leaves alone (its doc)",
)
def test_a_large_decode_is_not_walked_by_a_pass_right_after(passes: list[int]) -> None:
    lines = wires(2000)
    gc.collect()
    passes.clear()
    entries = decode_all(lines)
    # tracked allocations after the load
    after: list[list[object]] = [[] for _ in range(gc.get_threshold()[0] // 2)]
    assert passes == []
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert len(entries) == 2000 and len(after) > 0


def test_a_small_decode_leaves_the_collector_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = wires(10)
    gc.collect()

    def refuse() -> None:
        raise AssertionError("a small decode froze the heap")

    monkeypatch.setattr(gc, "freeze", refuse)
    assert len(decode_all(lines)) == 10
    assert gc.isenabled()


def test_objects_the_application_froze_stay_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = wires(2000)
    unfreeze, unfrozen = gc.unfreeze, []
    # not the freeze count: a frozen object that dies meanwhile (another test's thread
    # dropping its last reference) leaves the permanent generation on its own
    monkeypatch.setattr(gc, "unfreeze", lambda: unfrozen.append("unfreeze"))
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        assert len(decode_all(lines)) == 2000
        assert unfrozen == []
        assert gc.get_freeze_count() > 0
        assert gc.isenabled()
    finally:
        unfreeze()


def test_a_disabled_collector_stays_disabled() -> None:
    lines = wires(2000)
    gc.disable()
    try:
        assert len(decode_all(lines)) == 2000
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()
