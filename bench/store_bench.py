"""Benchmark: store append cost against session length, and load time (SPEC §2.1, §2.2).

Figures, per store section:

- **append p50/p99** of a one-entry batch into a session already holding 1k, 10k and 50k entries.
  It must stay flat: FileStore keeps a per-file ID index (keyed by file size) so the idempotency
  check does not re-read the file; MemoryStore has a dict per session.
- FileStore only: the **first append** by a fresh store object into the 50k session (it builds the
  index once by reading the file), and **load time** of 10k- and 100k-entry sessions (target: 100k
  under 1.5 s).

FileStore appends are measured with ``fsync=False`` (the CPU and syscall cost the index governs)
and with the default ``fsync=True`` (what durability costs on this disk).

MemoryStore also reports **load time** of 10k- and 100k-entry sessions (loads hand out independent
copies, so they are not free).

Run: ``.venv/bin/python bench/store_bench.py`` (``--stores memory,file``; ``--quick`` for smaller
sizes; ``--root DIR`` to measure another file system; ``--before REF`` to run the same bench
first on the ``src/`` of git revision ``REF`` in a subprocess and print both side by side). A new
store kind adds a section function to ``SECTIONS``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from durable_agent.ai import Message, TextContent
from durable_agent.session import Entry, MessageEntry, Store
from durable_agent.stores import FileStore, MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TEXT = "The quick brown fox jumps over the lazy dog. " * 6  # ~270 characters, a short turn
LOAD_100K_TARGET_S = 1.5
PREFILL_BATCH = 1000
RESULTS: dict[str, float] = {}
"""Every figure printed, in seconds, by label (what ``--baseline`` compares)."""


def report(label: str, seconds: float, text: str) -> None:
    RESULTS[label] = seconds
    print(text)


@dataclass(frozen=True)
class Config:
    append_sizes: tuple[int, ...]
    load_sizes: tuple[int, ...]
    samples: int
    fsync_samples: int
    root: Path


def make_entry(i: int) -> Entry:
    role = "user" if i % 2 == 0 else "assistant"
    message = Message(role=role, content=[TextContent(text=TEXT)], timestamp=T0)
    return MessageEntry(
        id=f"e{i:07d}",
        parent_id=f"e{i - 1:07d}" if i else None,
        created_at=T0 + timedelta(milliseconds=i),
        message=message,
    )


async def fill(store: Store, session_id: str, start: int, stop: int) -> None:
    """Append entries ``start..stop`` in large batches (setup, not measured)."""
    for lo in range(start, stop, PREFILL_BATCH):
        hi = min(stop, lo + PREFILL_BATCH)
        await store.append_entries(session_id, [make_entry(i) for i in range(lo, hi)])


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await call()
    return time.perf_counter() - began


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def append_latencies(store: Store, session_id: str, first: int, samples: int) -> list[float]:
    """Time ``samples`` one-entry appends, entry numbers from ``first`` on."""
    out = []
    for i in range(first, first + samples):
        entry = make_entry(i)
        began = time.perf_counter()
        await store.append_entries(session_id, [entry])
        out.append(time.perf_counter() - began)
    return out


async def append_curve(label: str, store: Store, session_id: str, cfg: Config, samples: int) -> int:
    """Append p50/p99 at each session length in ``cfg.append_sizes``, growing one session; the
    number of the next entry (the child of its last)."""
    await store.create_session(session_id)
    have = 0
    for size in cfg.append_sizes:
        await fill(store, session_id, have, size)
        await store.append_entries(session_id, [make_entry(size)])  # warm the index at this size
        lat = await append_latencies(store, session_id, size + 1, samples)
        have = size + 1 + samples
        name = f"{label} at {size} entries"
        RESULTS[f"{name}: p50"] = p(lat, 50)
        report(
            f"{name}: p99",
            p(lat, 99),
            f"  {label:<22} at {size:>6} entries: p50 {ms(p(lat, 50))}  p99 {ms(p(lat, 99))}",
        )
    return have


async def memory_section(cfg: Config) -> None:
    print("MemoryStore")
    await append_curve("append", MemoryStore(), "curve", cfg, cfg.samples)
    for size in cfg.load_sizes:
        store = MemoryStore()
        await store.create_session("load")
        await fill(store, "load", 0, size)
        seconds = await timed(lambda s=store: s.load_entries("load"))  # type: ignore[misc]
        report(f"memory load {size}", seconds, f"  load {size:>6} entries: {seconds:7.3f} s")


async def file_section(cfg: Config) -> None:
    print(f"FileStore (root {cfg.root})")
    fast, synced = FileStore(cfg.root, fsync=False), FileStore(cfg.root)
    after = await append_curve("append, fsync=False", fast, "curve-fast", cfg, cfg.samples)
    await append_curve("append, fsync=True", synced, "curve-sync", cfg, cfg.fsync_samples)

    cold = FileStore(cfg.root, fsync=False)  # as in a new process: no index yet
    seconds = await timed(lambda: cold.append_entries("curve-fast", [make_entry(after)]))
    size = max(cfg.append_sizes)
    report(
        "file first append",
        seconds,
        f"  first append by a fresh store at ~{size} entries (builds the index): {ms(seconds)}",
    )

    for size in cfg.load_sizes:
        await load_time(cfg, size)


async def load_time(cfg: Config, size: int) -> None:
    """Load a ``size``-entry session with a fresh store (nothing cached)."""
    session_id = f"load-{size}"
    writer = FileStore(cfg.root, fsync=False)
    await writer.create_session(session_id)
    await fill(writer, session_id, 0, size)
    reader = FileStore(cfg.root)
    seconds = await timed(lambda: reader.load_entries(session_id))
    note = ""
    if size == 100_000:
        verdict = "ok" if seconds < LOAD_100K_TARGET_S else "OVER"
        note = f"  (target < {LOAD_100K_TARGET_S} s: {verdict})"
    report(f"file load {size}", seconds, f"  load {size:>6} entries: {seconds:7.3f} s{note}")


SECTIONS: dict[str, Callable[[Config], Awaitable[None]]] = {
    "memory": memory_section,
    "file": file_section,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--stores", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--samples", type=int, default=300, help="appends timed per size")
    parser.add_argument("--fsync-samples", type=int, default=100, help="with fsync=True")
    parser.add_argument("--quick", action="store_true", help="smaller sessions (a smoke run)")
    parser.add_argument("--root", type=Path, help="FileStore directory (default: a temp dir)")
    parser.add_argument(
        "--before",
        "--baseline",
        dest="baseline",
        metavar="REV",
        help="git revision to measure first, side by side",
    )
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)  # the baseline's answer
    return parser.parse_args()


def run_baseline(ref: str, argv: list[str]) -> dict[str, float]:
    """Run this script on ``ref``'s ``src/`` in a subprocess and return its figures."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", ref, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        out = Path(tmp) / "results.json"
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        print(f"== baseline {ref} ==", flush=True)
        subprocess.run([sys.executable, __file__, *argv, "--json", str(out)], env=env, check=True)
        data: dict[str, float] = json.loads(out.read_text())
        return data


def side_by_side(ref: str, before: dict[str, float]) -> None:
    print(f"\n{'figure':<44} {ref:>12} {'this tree':>12} {'ratio':>7}")
    for label, after in RESULTS.items():
        old = before.get(label)
        if old is None:
            print(f"{label:<44} {'-':>12} {after * 1000:9.3f} ms")
            continue
        print(f"{label:<44} {old * 1000:9.3f} ms {after * 1000:9.3f} ms {after / old:6.2f}x")


async def main() -> None:
    args = parse_args()
    before: dict[str, float] | None = None
    if args.baseline:
        given = ("--before", "--baseline", args.baseline)
        argv = [a for a in sys.argv[1:] if a not in given and a.split("=")[0] not in given]
        before = run_baseline(args.baseline, argv)
        print("== this tree ==", flush=True)
    unknown = set(args.stores.split(",")) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown stores {sorted(unknown)}; choose from {sorted(SECTIONS)}")
    with tempfile.TemporaryDirectory(dir=args.root) as tmp:
        cfg = Config(
            append_sizes=(100, 1000) if args.quick else (1_000, 10_000, 50_000),
            load_sizes=(1000,) if args.quick else (10_000, 100_000),
            samples=args.samples,
            fsync_samples=args.fsync_samples,
            root=Path(tmp),
        )
        for name in args.stores.split(","):
            await SECTIONS[name](cfg)
    if args.json:
        args.json.write_text(json.dumps(RESULTS))
    if before is not None:
        side_by_side(args.baseline, before)


if __name__ == "__main__":
    asyncio.run(main())
