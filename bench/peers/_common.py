"""Shared helpers of the peer benchmarks: statistics, figure records, server start-up."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO, REPO / "bench"):  # tests.support.ferretdb, bench/_servers.py
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from _stats import summary  # noqa: E402

#: ~270 characters: the text of every message on both sides.
TEXT = "The quick brown fox jumps over the lazy dog. " * 6


def figure(
    name: str, unit: str, ours: Sequence[float], peer: Sequence[float], better: str
) -> dict[str, Any]:
    """One row of the table: both sides over repetitions and the ratio of the medians
    (``ours / peer``); ``better`` is ``"lower"`` or ``"higher"``."""
    a, b = summary(ours), summary(peer)
    return {
        "name": name,
        "unit": unit,
        "better": better,
        "durable_agent": a,
        "peer": b,
        "ratio_ours_over_peer": a["median"] / b["median"] if b["median"] else float("nan"),
    }


def cell(s: dict[str, float], digits: int) -> str:
    if s["n"] == 1 or s["min"] == s["max"]:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}..{s['max']:.{digits}f})"


def print_table(title: str, peer: str, rows: Sequence[dict[str, Any]]) -> None:
    print(f"\n{title}  [median (min..max) over repetitions; ratio = durable-agent / {peer}]")
    header = f"  {'figure':<44} {'unit':<9} {'durable-agent':>26} {peer:>26} {'ratio':>8}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for r in rows:
        digits = 0 if r["unit"] in ("bytes", "events", "entries/s", "turn") else 2
        print(
            f"  {r['name']:<44} {r['unit']:<9} {cell(r['durable_agent'], digits):>26} "
            f"{cell(r['peer'], digits):>26} {r['ratio_ours_over_peer']:>7.3g}x"
        )
