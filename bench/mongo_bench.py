"""Benchmark: MongoStore on a loopback FerretDB (SQLite backend) that this script starts itself.

Figures, per implementation side by side:

- append latency p50/p99 for 1-entry and 10-entry batches, one session, sequential calls;
- load time of a 10k-entry session built in 10-entry appends (fetch plus decoding every entry),
  for the stores the server's share alone (the raw ``find``), and the collection's size per
  message (``collStats``): FerretDB parses every stored document of the collection on each load,
  so its load time follows those bytes;
- resuming that session after seq 9,990 (``load_entries_after``: the last 10 entries, as a
  client that reconnects asks for them), beside the full load;
- entries/s with 20 concurrent sessions, each task appending 1-entry batches to its own session.

Implementations (they take turns call by call in the append and load scenarios, so load
spikes on a shared machine hit them alike): ``after`` is this checkout's ``MongoStore``;
``--before REF`` adds ``before``, the store of another commit, checked out with ``git worktree``
into a temporary directory and imported from there as ``durable_agent_before``, so one run prints
before and after side by side; ``--peer`` adds the OpenAI Agents SDK's ``MongoDBSession`` (needs
the ``openai-agents`` package: run with ``.venv-peers/bin/python``, see ``make bench-peers``) and
checks the targets against it (10-entry append p50 <= 1.5x, 10k load <= 2x, 1-entry append p50
<= 1.1x).

Each scenario of each side gets a fresh database: FerretDB's SQLite backend pushes only ``_id``
equality down to SQL and scans the whole collection for other filters, so leftovers would slow
whichever side ran later. FerretDB's ``$inc`` is not atomic and it is slower per document than
MongoDB; the design targets MongoDB, the figures are FerretDB's.

Run: ``.venv-peers/bin/python bench/mongo_bench.py --before HEAD~5 --peer`` (``--quick`` for a smoke
run, ``--uri mongodb://…`` to measure another server, ``--json`` for machine-readable output).
The server is started from the binary named by ``$DURABLE_AGENT_FERRETDB`` or the cache path,
built with Go if missing, and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.ferretdb

from pymongo import AsyncMongoClient
from tests.support.ferretdb import FERRETDB_VERSION, start_ferretdb

ROOT = Path(__file__).resolve().parents[1]

#: Targets, as a ratio to the peer's figure (ours / peer).
PEER_TARGETS = {"append_1": 1.1, "append_10": 1.5, "load_10k": 2.0}
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TEXT = "The quick brown fox jumps over the lazy dog. " * 6  # ~270 characters, a short turn
LOAD_SIZE = 10_000
RESUME_AFTER = 9_990
BUILD_STEP = 10  # entries per append when building the load session


def kit(package: str) -> SimpleNamespace:
    """The names the bench needs from one copy of the package (this one or ``--before``'s)."""
    ai = importlib.import_module(f"{package}.ai")
    session = importlib.import_module(f"{package}.session")
    mongo = importlib.import_module(f"{package}.stores.mongo")
    return SimpleNamespace(
        Message=ai.Message,
        TextContent=ai.TextContent,
        MessageEntry=session.MessageEntry,
        MongoStore=mongo.MongoStore,
    )


@contextlib.contextmanager
def before_package(ref: str) -> Iterator[str]:
    """Check ``ref`` out with ``git worktree`` into a temporary directory and import its
    ``durable_agent`` as ``durable_agent_before`` (the package's imports are all relative)."""
    with tempfile.TemporaryDirectory(prefix="mongo-bench-before-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "-q", "--detach", str(tree), ref], check=True)
        try:
            package = tree / "src" / "durable_agent"
            spec = importlib.util.spec_from_file_location(
                "durable_agent_before",
                package / "__init__.py",
                submodule_search_locations=[str(package)],
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["durable_agent_before"] = module
            spec.loader.exec_module(module)
            yield "durable_agent_before"
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def chain(names: SimpleNamespace, session: str, start: int, count: int) -> list[Any]:
    """Messages ``start .. start + count - 1`` of a session, each the child of the one before."""
    out = []
    for i in range(start, start + count):
        role = "user" if i % 2 == 0 else "assistant"
        message = names.Message(role=role, content=[names.TextContent(text=TEXT)], timestamp=T0)
        out.append(
            names.MessageEntry(
                id=f"{session}-{i:06d}",
                parent_id=f"{session}-{i - 1:06d}" if i else None,
                created_at=T0 + timedelta(milliseconds=i),
                message=message,
            )
        )
    return out


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Side(Protocol):
    """One session of one implementation: append messages ``start..start+count``, count all."""

    async def append(self, start: int, count: int) -> None: ...
    async def count(self) -> int: ...


class StoreSide:
    """A MongoStore session (this checkout's or ``--before``'s)."""

    def __init__(self, names: SimpleNamespace, store: Any, session_id: str) -> None:
        self.names = names
        self.store = store
        self.sid = session_id

    async def append(self, start: int, count: int) -> None:
        await self.store.append_entries(self.sid, chain(self.names, self.sid, start, count))

    async def count(self) -> int:
        return len(await self.store.load_entries(self.sid))

    async def count_after(self, after: int) -> int | None:
        """How many entries follow seq ``after`` (``None``: this store cannot read after)."""
        read = getattr(self.store, "load_entries_after", None)
        return None if read is None else len(await read(self.sid, after))


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


def store_opener(names: SimpleNamespace) -> Opener:
    async def open_side(client: AsyncMongoClient[Any], db: str, sid: str) -> Side:
        store = names.MongoStore(client[db])
        await store.create_session(sid)
        return StoreSide(names, store, sid)

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
    """Median load of a 10k-message session, and of its last 10 entries after seq 9,990, the
    sides taking turns load by load. Every side is built in 10-message appends (one document
    per append: the layout a chat of 5-turn appends gets)."""
    dbs = {name: fresh_db(f"load_{name}") for name in openers}
    sides = {name: await open_side(client, dbs[name], "big") for name, open_side in openers.items()}
    for side in sides.values():
        for start in range(0, LOAD_SIZE, BUILD_STEP):
            await side.append(start, BUILD_STEP)
        assert await side.count() == LOAD_SIZE  # also the warm-up load
    totals: dict[str, list[float]] = {name: [] for name in sides}
    fetches: dict[str, list[float]] = {name: [] for name in sides if name != "peer"}
    resumes: dict[str, list[float]] = {name: [] for name in fetches}
    names = list(sides)
    for k in range(repeats):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            side = sides[name]
            began = time.perf_counter()
            assert await side.count() == LOAD_SIZE
            totals[name].append((time.perf_counter() - began) * 1000)
            if isinstance(side, StoreSide):
                fetches[name].append(await _raw_fetch(client, dbs[name]))
                began = time.perf_counter()
                got = await side.count_after(RESUME_AFTER)
                if got is not None:
                    assert got == LOAD_SIZE - RESUME_AFTER
                    resumes[name].append((time.perf_counter() - began) * 1000)
    out = {}
    for name in names:
        figures = {"total_ms": statistics.median(totals[name]), "total_min_ms": min(totals[name])}
        if fetches.get(name):
            figures["server_fetch_ms"] = statistics.median(fetches[name])
        if resumes.get(name):
            figures["resume_ms"] = statistics.median(resumes[name])
        coll = "agent_messages" if name == "peer" else "entries"
        stats = await client[dbs[name]].command("collStats", coll)
        figures["bytes_per_message"] = stats.get("size", 0) / LOAD_SIZE  # what a load reads
        await client.drop_database(dbs[name])
        out[name] = figures
    return out


async def _raw_fetch(client: AsyncMongoClient[Any], db: str) -> float:
    """Milliseconds the server takes to hand over every entry document of the session."""
    began = time.perf_counter()
    cursor = client[db]["entries"].find({"session_id": "big"}, {"_id": 0}, batch_size=100_000)
    assert len(await cursor.sort("seq", 1).to_list(None)) > 0
    return (time.perf_counter() - began) * 1000


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


async def run(uri: str, packages: dict[str, str], quick: bool) -> dict[str, dict[str, Any]]:
    """The figures of every side: ``packages`` maps a side name to the package it imports
    (``peer`` to nothing)."""
    names = list(packages)
    openers = {
        name: open_peer if name == "peer" else store_opener(kit(package))
        for name, package in packages.items()
    }
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
    ("resume after seq 9,990 (10 entries)", "ms", "load_10k", "resume_ms"),
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
            before = values["before"]
            line += f"{after / before:>13.2f}x" if after and before else f"{'-':>14}"
        if "peer" in results and values["peer"] and after:
            ratio = after / values["peer"]
            line += f"{ratio:>11.2f}x"
            target = PEER_TARGETS.get(key)
            if target is not None and field in ("p50_ms", "total_ms"):
                line += f"  <= {target:g}x {'ok' if ratio <= target else 'MISSED'}"
        print(line)
    load = results["after"]["load_10k"]
    if "resume_ms" in load:
        print(
            f"  resume after seq {RESUME_AFTER:,} vs full load of {LOAD_SIZE:,}: "
            f"{load['resume_ms']:.1f} vs {load['total_ms']:.1f} ms "
            f"({load['resume_ms'] / load['total_ms']:.2f}x)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="measure this server instead of starting FerretDB")
    parser.add_argument("--before", metavar="REF", help="also measure the store of this commit")
    parser.add_argument("--peer", action="store_true", help="also measure openai-agents")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        packages = {"after": "durable_agent"}
        if args.before:
            packages = {"before": stack.enter_context(before_package(args.before)), **packages}
        if args.peer:
            packages["peer"] = ""
        if args.uri:
            server = args.uri
            results = asyncio.run(run(args.uri, packages, args.quick))
        else:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="mongo-bench-"))
            ferretdb = start_ferretdb(Path(workdir))
            try:
                results = asyncio.run(run(ferretdb.uri, packages, args.quick))
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
