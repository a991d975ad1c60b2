"""Benchmark: MongoStore on a loopback FerretDB (SQLite backend) that this script starts itself.

Figures (SPEC §2.3 targets on loopback FerretDB: append p50 < 5 ms, 10k-entry load < 500 ms):

- append latency p50/p99 for 1-entry and 10-entry batches, one session, sequential calls;
- load time of a 10k-entry session, split into the server's share (the raw ``find``) and the
  total (fetch plus decoding every entry);
- entries/s with 20 concurrent sessions, each task appending 1-entry batches to its own session.

Each scenario gets a fresh database: FerretDB's SQLite backend pushes only ``_id`` equality down
to SQL and scans the whole collection for other filters, so a query's cost grows with everything
else stored in the collection; the figures say how big the collection was.

Run: ``.venv/bin/python bench/mongo_bench.py`` (``--uri mongodb://…`` to measure another server;
``--json`` for machine-readable output). The server is started from the binary named by
``$DURABLE_AGENT_FERRETDB`` or the cache path, built with Go if missing, and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.ferretdb

from pymongo import AsyncMongoClient
from tests.support.ferretdb import start_ferretdb

from durable_agent.ai import Message, TextContent
from durable_agent.session import MessageEntry
from durable_agent.stores.mongo import MongoStore

APPEND_P50_TARGET_MS = 5.0
LOAD_TARGET_MS = 500.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TEXT = "The quick brown fox jumps over the lazy dog. " * 6  # ~270 characters, a short turn


def make_entry(session: str, i: int, parent: str | None) -> MessageEntry:
    role = "user" if i % 2 == 0 else "assistant"
    message = Message(role=role, content=[TextContent(text=TEXT)], timestamp=T0)
    return MessageEntry(
        id=f"{session}-{i:06d}",
        parent_id=parent,
        created_at=T0 + timedelta(milliseconds=i),
        message=message,
    )


def chain(session: str, start: int, count: int) -> list[MessageEntry]:
    return [
        make_entry(session, i, f"{session}-{i - 1:06d}" if i else None)
        for i in range(start, start + count)
    ]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bench_append(client: AsyncMongoClient[Any], batch: int, calls: int) -> dict[str, float]:
    store = MongoStore(client[f"bench_append_{batch}"])
    await store.create_session("s")
    await store.append_entries("s", chain("s", 0, batch))  # warm-up: indexes, connections
    samples = []
    for k in range(1, calls + 1):
        entries = chain("s", k * batch, batch)
        began = time.perf_counter()
        await store.append_entries("s", entries)
        samples.append((time.perf_counter() - began) * 1000)
    return {
        "p50_ms": statistics.median(samples),
        "p99_ms": percentile(samples, 0.99),
        "calls": calls,
        "collection_entries": (calls + 1) * batch,
    }


async def bench_load(client: AsyncMongoClient[Any], size: int, repeats: int) -> dict[str, float]:
    database = client["bench_load"]
    store = MongoStore(database)
    await store.create_session("big")
    for start in range(0, size, 1000):
        await store.append_entries("big", chain("big", start, min(1000, size - start)))
    totals, raw = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        loaded = await store.load_entries("big")
        totals.append((time.perf_counter() - began) * 1000)
        assert len(loaded) == size
        began = time.perf_counter()
        cursor = database["entries"].find({"session_id": "big"}, {"_id": 0, "seq": 1, "wire": 1})
        docs = await cursor.sort("seq", 1).to_list(None)
        raw.append((time.perf_counter() - began) * 1000)
        assert len(docs) == size
    return {
        "total_ms": statistics.median(totals),
        "total_min_ms": min(totals),
        "server_fetch_ms": statistics.median(raw),
        "entries": size,
    }


async def bench_concurrent(
    client: AsyncMongoClient[Any], sessions: int, per_session: int
) -> dict[str, float]:
    store = MongoStore(client["bench_concurrent"])
    names = [f"c{n}" for n in range(sessions)]
    for name in names:
        await store.create_session(name)

    async def writer(name: str) -> None:
        for entry in chain(name, 0, per_session):
            await store.append_entries(name, [entry])

    began = time.perf_counter()
    await asyncio.gather(*(writer(name) for name in names))
    elapsed = time.perf_counter() - began
    for name in names:
        assert len(await store.load_entries(name)) == per_session
    return {
        "entries_per_s": sessions * per_session / elapsed,
        "sessions": sessions,
        "entries": sessions * per_session,
        "seconds": elapsed,
    }


async def run(uri: str, quick: bool) -> dict[str, Any]:
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        for name in await client.list_database_names():
            if name.startswith("bench_"):
                await client.drop_database(name)
        return {
            "append_1": await bench_append(client, 1, 100 if quick else 300),
            "append_10": await bench_append(client, 10, 50 if quick else 150),
            "load_10k": await bench_load(client, 10_000, 3 if quick else 5),
            "concurrent_20": await bench_concurrent(client, 20, 20 if quick else 50),
        }
    finally:
        await client.close()


def report(results: dict[str, Any]) -> None:
    a1, a10, load, conc = (
        results["append_1"],
        results["append_10"],
        results["load_10k"],
        results["concurrent_20"],
    )

    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(f"MongoStore on {results['server']}")
    for label, figures in (("1-entry", a1), ("10-entry", a10)):
        print(
            f"  append {label:8s} p50 {figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms"
            f"  ({figures['calls']} calls, collection grows to {figures['collection_entries']})"
            f"  [p50 target < {APPEND_P50_TARGET_MS:g} ms: "
            f"{mark(figures['p50_ms'] < APPEND_P50_TARGET_MS)}]"
        )
    print(
        f"  load 10k entries   {load['total_ms']:6.0f} ms median (min {load['total_min_ms']:.0f})"
        f"; server fetch alone {load['server_fetch_ms']:.0f} ms"
        f"  [target < {LOAD_TARGET_MS:g} ms: {mark(load['total_ms'] < LOAD_TARGET_MS)}]"
    )
    print(
        f"  20 concurrent sessions: {conc['entries_per_s']:6.0f} entries/s"
        f"  ({conc['entries']} 1-entry appends in {conc['seconds']:.2f} s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="measure this server instead of starting FerretDB")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    args = parser.parse_args()
    if args.uri:
        results = asyncio.run(run(args.uri, args.quick))
        results["server"] = args.uri
    else:
        with tempfile.TemporaryDirectory(prefix="mongo-bench-") as workdir:
            server = start_ferretdb(Path(workdir))
            try:
                results = asyncio.run(run(server.uri, args.quick))
            finally:
                server.stop()
        results["server"] = "FerretDB v1.24.2 (SQLite backend, loopback)"
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
