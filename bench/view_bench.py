"""Benchmark: the cost of computing a model view from the index (SPEC §3, `path` over a mapping).

Builds a 100k-entry transcript tree whose active leaf sits at depth 1k (then 10k); every other
entry hangs off the main chain as a side branch (abandoned retries and edits). Times
``path(index, leaf)`` followed by ``model_view(path)``, what every run and ``messages()`` does.
Target: under 20 ms at depth 1k.

Run: ``.venv/bin/python bench/view_bench.py``
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from durable_agent.ai import Message, TextContent, ToolCall
from durable_agent.session import (
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    model_view,
    new_id,
    path,
    tree,
)

TOTAL = 100_000
TARGET_MS = 20.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def message(i: int) -> Message:
    """A realistic mix: user turns, assistant replies with tool calls, tool results."""
    stamp = T0 + timedelta(seconds=i)
    match i % 4:
        case 0:
            return Message(
                role="user", content=[TextContent(text=f"question {i}")], timestamp=stamp
            )
        case 1:
            call = ToolCall(id=f"call-{i}", name="lookup", arguments={"q": i})
            return Message(
                role="assistant",
                content=[TextContent(text="let me check"), call],
                stop_reason="tool_use",
                timestamp=stamp,
            )
        case 2:
            return Message(
                role="tool_result",
                content=[TextContent(text=f"result {i}")],
                tool_call_id=f"call-{i - 1}",
                tool_name="lookup",
                timestamp=stamp,
            )
        case _:
            return Message(
                role="assistant", content=[TextContent(text=f"answer {i}")], timestamp=stamp
            )


def build(
    depth: int, total: int = TOTAL, *, compaction: bool = False
) -> tuple[dict[str, Entry], str]:
    """An ID→entry index of ``total`` entries and the ID of a leaf at ``depth``."""
    rng = random.Random(depth)
    index: dict[str, Entry] = {}
    chain: list[str] = []
    parent: str | None = None
    for i in range(depth):
        eid = new_id()
        created = T0 + timedelta(seconds=i)
        entry: Entry
        if compaction and i == depth // 2:
            entry = CompactionEntry(
                id=eid,
                parent_id=parent,
                created_at=created,
                summary="summary of the first half",
                first_kept_id=chain[-8],
            )
        elif i % 50 == 49:
            entry = CustomEntry.model_validate(
                {"id": eid, "parent_id": parent, "created_at": created, "kind": "mode", "m": i}
            )
        else:
            entry = MessageEntry(id=eid, parent_id=parent, created_at=created, message=message(i))
        index[eid] = entry
        chain.append(eid)
        parent = eid
    side_parents = list(chain)
    for j in range(total - depth):
        eid = new_id()
        anchor = rng.choice(side_parents)
        index[eid] = MessageEntry(
            id=eid,
            parent_id=anchor,
            created_at=T0 + timedelta(seconds=depth + j),
            message=message(j),
        )
        if rng.random() < 0.3:  # some side branches grow a few levels deep
            side_parents.append(eid)
    return index, chain[-1]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def report(label: str, samples: list[float], target: float | None = None) -> None:
    verdict = ""
    if target is not None:
        verdict = "  OK" if statistics.median(samples) < target else f"  OVER {target:.0f} ms"
    print(
        f"{label:<44} median {statistics.median(samples):8.3f} ms  "
        f"min {min(samples):8.3f}  max {max(samples):8.3f}{verdict}"
    )


def measure(depth: int, compaction: bool) -> None:
    started = time.perf_counter()
    index, leaf = build(depth, compaction=compaction)
    built_ms = (time.perf_counter() - started) * 1000
    p = path(index, leaf)
    view = model_view(p)
    assert len(p) == depth, (len(p), depth)
    tag = f"depth {depth:>6}{' +compaction' if compaction else ''}"
    print(
        f"{tag}: {len(index)} entries (built in {built_ms:.0f} ms), "
        f"path {len(p)}, view {len(view)} messages"
    )
    report("  path(index, leaf)", timed(lambda: path(index, leaf), 50))
    report("  model_view(path)", timed(lambda: model_view(p), 50))
    report(
        "  path + model_view",
        timed(lambda: model_view(path(index, leaf)), 50),
        TARGET_MS if depth == 1_000 else None,
    )
    entries = list(index.values())
    report("  path(list, leaf) (builds the index)", timed(lambda: path(entries, leaf), 5))
    if not compaction:
        report("  tree(all entries)", timed(lambda: tree(entries), 3))


def main() -> None:
    for depth in (1_000, 10_000):
        for compaction in (False, True):
            measure(depth, compaction)


if __name__ == "__main__":
    main()
