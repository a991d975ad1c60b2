"""Benchmark: MongoStore on a loopback FerretDB (SQLite backend) that this script starts itself.

Figures, per implementation side by side:

- append latency p50/p99 for 1-entry and 10-entry batches, one session, sequential calls;
- load time of a 10k-entry session (fetch plus decoding every entry), for the stores the
  server's share alone (the raw ``find``), and the collection's size per message (``collStats``):
  FerretDB parses every stored document of the collection on each load, so its load time
  follows those bytes;
- entries/s with 20 concurrent sessions, each task appending 1-entry batches to its own session.

Implementations (they take turns call by call in the append and load scenarios, so load
spikes on a shared machine hit them alike): ``after`` is today's ``MongoStore``; ``--baseline``
adds ``before``, the store of main at a0d23ef (``bench/_mongo_baseline.py``, a verbatim copy),
so one run prints before and after side by side; ``--peer`` adds the OpenAI Agents SDK's
``MongoDBSession`` (needs the ``openai-agents`` package: run with ``.venv-peers/bin/python``, see
``make bench-peers``) and checks the issue 12 targets against it (10-entry append p50 <= 1.5x,
10k load <= 2x, 1-entry append p50 <= 1.1x).

Each scenario of each side gets a fresh database: FerretDB's SQLite backend pushes only ``_id``
equality down to SQL and scans the whole collection for other filters, so leftovers would slow
whichever side ran later. FerretDB's ``$inc`` is not atomic and it is slower per document than
MongoDB; the design targets MongoDB, the figures are FerretDB's.

Run: ``.venv-peers/bin/python bench/mongo_bench.py --baseline --peer`` (``--quick`` for a smoke
run, ``--uri mongodb://…`` to measure another server, ``--json`` for machine-readable output).
The server is started from the binary named by ``$DURABLE_AGENT_FERRETDB`` or the cache path,
built with Go if missing, and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.ferretdb
sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _mongo_baseline

from pymongo import AsyncMongoClient
from tests.support.ferretdb import FERRETDB_VERSION, start_ferretdb

from durable_agent.ai import Message, TextContent
from durable_agent.session import MessageEntry
from durable_agent.stores.mongo import MongoStore

#: Issue 12 targets, as a ratio to the peer's figure (ours / peer).
PEER_TARGETS = {"append_1": 1.1, "append_10": 1.5, "load_10k": 2.0}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TEXT = "The quick brown fox jumps over the lazy dog. " * 6  # ~270 characters, a short turn
LOAD_SIZE = 10_000


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


class Side(Protocol):
    """One session of one implementation: append messages ``start..start+count``, count all."""

    async def append(self, start: int, count: int) -> None: ...
    async def count(self) -> int: ...


class StoreSide:
    """A MongoStore (today's or the baseline's) session."""

    def __init__(self, store: Any, session_id: str) -> None:
        self.store = store
        self.sid = session_id

    async def append(self, start: int, count: int) -> None:
        await self.store.append_entries(self.sid, chain(self.sid, start, count))

    async def count(self) -> int:
        return len(await self.store.load_entries(self.sid))


class PeerSide:
    """An openai-agents ``MongoDBSession``: one document per ``add_items`` call."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def append(self, start: int, count: int) -> None:
        await self.session.add_items(
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": TEXT}
                for i in range(start, start + count)
            ]
        )

    async def count(self) -> int:
        return len(await self.session.get_items())


Opener = Callable[[AsyncMongoClient[Any], str, str], Awaitable[Side]]


def store_opener(store_class: Any) -> Opener:
    async def open_side(client: AsyncMongoClient[Any], db: str, sid: str) -> Side:
        store = store_class(client[db])
        await store.create_session(sid)
        return StoreSide(store, sid)

    return open_side


async def open_peer(client: AsyncMongoClient[Any], db: str, sid: str) -> Side:
    from agents.extensions.memory import MongoDBSession

    return PeerSide(MongoDBSession(sid, client=client, database=db))


def fresh_db(tag: str) -> str:
    return f"bench_{tag}_{uuid.uuid4().hex[:8]}"


async def bench_append(
    client: AsyncMongoClient[Any], openers: dict[str, Opener], batch: int, calls: int
) -> dict[str, dict[str, float]]:
    """Append latency, the sides taking turns call by call (so load spikes on a shared machine
    hit every side alike), each in its own database."""
    dbs = {name: fresh_db(f"append{batch}_{name}") for name in openers}
    sides = {name: await open_side(client, dbs[name], "s") for name, open_side in openers.items()}
    for side in sides.values():
        await side.append(0, batch)  # warm-up, same on every side: indexes, connections
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for k in range(1, calls + 1):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            began = time.perf_counter()
            await sides[name].append(k * batch, batch)
            samples[name].append((time.perf_counter() - began) * 1000)
    out = {}
    for name, side in sides.items():
        assert await side.count() == (calls + 1) * batch
        await client.drop_database(dbs[name])
        got = samples[name]
        out[name] = {"p50_ms": statistics.median(got), "p99_ms": percentile(got, 0.99)}
    return out


async def bench_load(
    client: AsyncMongoClient[Any], openers: dict[str, Opener], repeats: int
) -> dict[str, dict[str, float]]:
    """Median load of a 10k-message session, the sides taking turns load by load. The peer is
    built in 10-message appends (one document per append: the layout a chat of 5-turn appends
    gets), the stores in 1000-entry appends (one document per entry whatever the batch, and the
    baseline's 10-entry appends would take minutes on a loaded machine)."""
    dbs = {name: fresh_db(f"load_{name}") for name in openers}
    sides = {name: await open_side(client, dbs[name], "big") for name, open_side in openers.items()}
    for name, side in sides.items():
        step = 10 if name == "peer" else 1000
        for start in range(0, LOAD_SIZE, step):
            await side.append(start, step)
        assert await side.count() == LOAD_SIZE  # also the warm-up load
    totals: dict[str, list[float]] = {name: [] for name in sides}
    fetches: dict[str, list[float]] = {name: [] for name in sides if name != "peer"}
    names = list(sides)
    for k in range(repeats):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            began = time.perf_counter()
            assert await sides[name].count() == LOAD_SIZE
            totals[name].append((time.perf_counter() - began) * 1000)
            if name in fetches:
                began = time.perf_counter()
                cursor = client[dbs[name]]["entries"].find(
                    {"session_id": "big"}, {"_id": 0, "seq": 1, "wire": 1}, batch_size=100_000
                )
                assert len(await cursor.sort("seq", 1).to_list(None)) == LOAD_SIZE
                fetches[name].append((time.perf_counter() - began) * 1000)
    out = {}
    for name in names:
        figures = {"total_ms": statistics.median(totals[name]), "total_min_ms": min(totals[name])}
        if name in fetches:
            figures["server_fetch_ms"] = statistics.median(fetches[name])
        coll = "agent_messages" if name == "peer" else "entries"
        stats = await client[dbs[name]].command("collStats", coll)
        figures["bytes_per_message"] = stats.get("size", 0) / LOAD_SIZE  # what a load reads
        await client.drop_database(dbs[name])
        out[name] = figures
    return out


async def bench_concurrent(
    client: AsyncMongoClient[Any], open_side: Opener, sessions: int, per_session: int
) -> dict[str, float]:
    db = fresh_db("concurrent")
    sides = [await open_side(client, db, f"c{n}") for n in range(sessions)]
    for side in sides:
        await side.append(0, 1)  # warm-up: every session has a document before the clock starts

    async def writer(side: Side) -> None:
        for i in range(1, per_session + 1):
            await side.append(i, 1)

    began = time.perf_counter()
    await asyncio.gather(*(writer(side) for side in sides))
    elapsed = time.perf_counter() - began
    for side in sides:
        assert await side.count() == per_session + 1
    await client.drop_database(db)
    return {"entries_per_s": sessions * per_session / elapsed}


async def run(uri: str, names: list[str], quick: bool) -> dict[str, dict[str, Any]]:
    known: dict[str, Opener] = {"after": store_opener(MongoStore), "peer": open_peer}
    if "before" in names:
        from _mongo_baseline import MongoStore as BaselineStore

        known["before"] = store_opener(BaselineStore)
    openers = {name: known[name] for name in names}
    calls1, calls10, loads, per_session = (60, 30, 3, 20) if quick else (200, 100, 5, 50)
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, serverSelectionTimeoutMS=5000)
    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    try:
        for key, figures in (
            ("append_1", await bench_append(client, openers, 1, calls1)),
            ("append_10", await bench_append(client, openers, 10, calls10)),
            ("load_10k", await bench_load(client, openers, loads)),
        ):
            for name, values in figures.items():
                results[name][key] = values
            print(f"  {key} done", file=sys.stderr, flush=True)
        for name in names * 2:  # twice, alternating; each run has the server to itself
            got = await bench_concurrent(client, openers[name], 20, per_session)
            results[name].setdefault("concurrent_runs", []).append(got["entries_per_s"])
        for name in names:
            runs = results[name].pop("concurrent_runs")
            results[name]["concurrent_20"] = {"entries_per_s": statistics.median(runs)}
        print("  concurrent_20 done", file=sys.stderr, flush=True)
    finally:
        await client.close()
    return results


ROWS = [
    ("append 1 entry, p50", "ms", "append_1", "p50_ms"),
    ("append 1 entry, p99", "ms", "append_1", "p99_ms"),
    ("append 10-entry batch, p50", "ms", "append_10", "p50_ms"),
    ("append 10-entry batch, p99", "ms", "append_10", "p99_ms"),
    ("load 10k entries (fetch + decode)", "ms", "load_10k", "total_ms"),
    ("load 10k: server fetch alone", "ms", "load_10k", "server_fetch_ms"),
    ("load 10k: stored bytes per message", "bytes", "load_10k", "bytes_per_message"),
    ("20 concurrent sessions, 1-entry appends", "entries/s", "concurrent_20", "entries_per_s"),
]


def report(results: dict[str, dict[str, Any]], server: str) -> None:
    names = list(results)
    print(f"MongoStore on {server}")
    head = f"  {'figure':<40} {'unit':<9}" + "".join(f"{n:>10}" for n in names)
    if "before" in results:
        head += f"{'after/before':>14}"
    if "peer" in results:
        head += f"{'after/peer':>12}  target"
    print(head)
    print("  " + "-" * (len(head) - 2))
    for label, unit, key, field in ROWS:
        values = {n: results[n][key].get(field) for n in names}
        line = f"  {label:<40} {unit:<9}" + "".join(
            f"{v:>10.2f}" if v is not None else f"{'-':>10}" for v in values.values()
        )
        after = values["after"]
        if "before" in results:
            line += f"{after / values['before']:>13.2f}x"
        if "peer" in results and values["peer"]:
            ratio = after / values["peer"]
            line += f"{ratio:>11.2f}x"
            target = PEER_TARGETS.get(key)
            if target is not None and field in ("p50_ms", "total_ms"):
                line += f"  <= {target:g}x {'ok' if ratio <= target else 'MISSED'}"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="measure this server instead of starting FerretDB")
    parser.add_argument("--baseline", action="store_true", help="also measure main's store")
    parser.add_argument("--peer", action="store_true", help="also measure openai-agents")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    args = parser.parse_args()
    names = ["before"] * args.baseline + ["after"] + ["peer"] * args.peer
    if args.uri:
        server = args.uri
        results = asyncio.run(run(args.uri, names, args.quick))
    else:
        with tempfile.TemporaryDirectory(prefix="mongo-bench-") as workdir:
            ferretdb = start_ferretdb(Path(workdir))
            try:
                results = asyncio.run(run(ferretdb.uri, names, args.quick))
            finally:
                ferretdb.stop()
        server = f"FerretDB {FERRETDB_VERSION} (SQLite backend, loopback)"
    if args.json:
        print(json.dumps({"server": server, "results": results}, indent=2))
    else:
        report(results, server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
