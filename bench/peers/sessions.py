"""(3) Session store: durable-agent's MongoStore vs the OpenAI Agents SDK's MongoDBSession.

Both on the same FerretDB server and the same ``AsyncMongoClient``; every scenario of every
repetition gets a fresh database on each side (FerretDB's SQLite backend scans a collection for
non-``_id`` filters, so leftovers would slow whichever side ran later); the sides alternate which
goes first. Messages are ~270-character texts on both sides: a durable-agent ``MessageEntry`` and
an SDK ``{"role", "content"}`` input item. Before a figure counts, the session is read back and
its length checked. Both store one document per append (ours adds a small claim per entry and a
slot per append, which a load never reads).

Each side runs in processes of its own, with ``src`` of the tree it measures first on
``PYTHONPATH``: this tree's, or, for ``run.py --before REV``, a ``git worktree`` of ``REV``'s, so
MongoStore before and after a change is measured side by side in one run, on one server. The
append figures are one process per repetition and side (``--side ours|peer --uri URI`` prints
them as JSON). The load figures are taken in turn: one process per side holds its 1k and 10k
sessions (``--serve-loads``) and every round asks each side for one load of each size, so a
load spike on a shared machine hits every side alike; their median (min..max) is over all
``reps * LOADS`` loads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from _common import REPO, TEXT, figure
from agents.extensions.memory import MongoDBSession
from pymongo import AsyncMongoClient

from _stats import pct
from durable_agent.ai import Message, TextContent
from durable_agent.session import MessageEntry
from durable_agent.stores.mongo import MongoStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Side(Protocol):
    """One session of one library: append a batch of messages, load them all."""

    async def append(self, start: int, count: int) -> None: ...
    async def count(self) -> int: ...


class Ours:
    def __init__(self, store: MongoStore, session_id: str) -> None:
        self.store = store
        self.sid = session_id

    @classmethod
    async def open(cls, client: AsyncMongoClient[Any], db: str, session_id: str) -> Ours:
        store = MongoStore(client[db])
        await store.create_session(session_id)
        return cls(store, session_id)

    def entry(self, i: int) -> MessageEntry:
        role = "user" if i % 2 == 0 else "assistant"
        return MessageEntry(
            id=f"{self.sid}-{i:06d}",
            parent_id=f"{self.sid}-{i - 1:06d}" if i else None,
            created_at=T0 + timedelta(milliseconds=i),
            message=Message(role=role, content=[TextContent(text=TEXT)], timestamp=T0),
        )

    async def append(self, start: int, count: int) -> None:
        await self.store.append_entries(
            self.sid, [self.entry(i) for i in range(start, start + count)]
        )

    async def count(self) -> int:
        return len(await self.store.load_entries(self.sid))


class Peer:
    def __init__(self, session: MongoDBSession) -> None:
        self.session = session

    @classmethod
    async def open(cls, client: AsyncMongoClient[Any], db: str, session_id: str) -> Peer:
        return cls(MongoDBSession(session_id, client=client, database=db))

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
SIDES: dict[str, Opener] = {"ours": Ours.open, "peer": Peer.open}
BUILD_BATCH = {"ours": 10, "peer": 10}


def fresh_db(tag: str) -> str:
    return f"peers_{tag}_{uuid.uuid4().hex[:8]}"


async def check(side: Side, expected: int, what: str) -> None:
    got = await side.count()
    if got != expected:
        raise RuntimeError(f"{what}: read back {got} messages, expected {expected}")


async def append_latency(
    client: AsyncMongoClient[Any], name: str, batch: int, calls: int
) -> tuple[float, float]:
    db = fresh_db(f"append{batch}_{name}")
    side = await SIDES[name](client, db, "s")
    await side.append(0, batch)  # warm-up, same on both sides: indexes, connection, session doc
    samples = []
    for k in range(1, calls + 1):
        began = time.perf_counter()
        await side.append(k * batch, batch)
        samples.append((time.perf_counter() - began) * 1000)
    await check(side, (calls + 1) * batch, f"{name} append {batch}")
    await client.drop_database(db)
    return pct(samples, 0.5), pct(samples, 0.99)


async def serve_loads(uri: str, name: str) -> None:
    """``--serve-loads``: build a session of each size in a fresh database (10-message appends,
    one document per append on both sides, so this is the figure a chat of 5-turn appends gets),
    print ``ready`` with the build seconds, then load the session of the size named on each line
    of stdin and print the milliseconds, until ``quit``."""
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, serverSelectionTimeoutMS=5000)
    built: dict[int, Side] = {}
    dbs = [fresh_db(f"load{size}_{name}") for size in SIZES]
    seconds = []
    for size, db in zip(SIZES, dbs, strict=True):
        side = await SIDES[name](client, db, "big")
        began = time.perf_counter()
        for start in range(0, size, BUILD_BATCH[name]):
            await side.append(start, BUILD_BATCH[name])
        seconds.append(time.perf_counter() - began)
        await check(side, size, f"{name} load {size}")  # also the warm-up load
        built[size] = side
    print("ready " + json.dumps(seconds), flush=True)
    while (line := sys.stdin.readline().strip()) not in ("", "quit"):
        size = int(line)
        began = time.perf_counter()
        n = await built[size].count()
        print((time.perf_counter() - began) * 1000, flush=True)
        if n != size:
            raise RuntimeError(f"{name}: loaded {n} of {size}")
    for db in dbs:
        await client.drop_database(db)
    await client.close()


async def interleaved_loads(
    uri: str, trees: dict[str, Path], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Load times of every side, taken in turn: one process per side builds its sessions (one
    side at a time), then each round asks every side for one load of each size, the sides'
    order rotating, so a load spike on a shared machine hits them all alike."""
    procs: dict[str, asyncio.subprocess.Process] = {}
    raw: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    try:
        for name, tree in trees.items():
            kind = "peer" if name == "peer" else "ours"
            procs[name] = proc = await asyncio.create_subprocess_exec(
                *[sys.executable, __file__, "--side", kind, "--uri", uri, "--serve-loads"],
                env=side_env(tree),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert proc.stdout is not None
            ready = (await proc.stdout.readline()).decode()
            if not ready.startswith("ready "):
                raise RuntimeError(f"side {name!r} did not start: {ready!r}")
            for size, sec in zip(SIZES, json.loads(ready[6:]), strict=True):
                raw[name].setdefault(f"build{size}_s", []).append(sec)
        names = list(procs)
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for size in SIZES:
                for name in order:
                    raw[name].setdefault(f"load{size}_ms", []).append(await ask(procs[name], size))
    finally:
        for proc in procs.values():
            if proc.stdin is not None and proc.returncode is None:
                with contextlib.suppress(ConnectionError):  # it exited already
                    proc.stdin.write(b"quit\n")
                    await proc.stdin.drain()
            await proc.wait()
    return raw


async def ask(proc: asyncio.subprocess.Process, size: int) -> float:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{size}\n".encode())
    await proc.stdin.drain()
    line = await proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a side process exited (code {await proc.wait()})")
    return float(line)


async def concurrent(
    client: AsyncMongoClient[Any], name: str, sessions: int, per_session: int
) -> float:
    db = fresh_db(f"conc_{name}")
    sides = [await SIDES[name](client, db, f"c{n}") for n in range(sessions)]
    for side in sides:
        await side.append(0, 1)  # warm-up: every session exists before the clock starts

    async def writer(side: Side) -> None:
        for i in range(1, per_session + 1):
            await side.append(i, 1)

    began = time.perf_counter()
    await asyncio.gather(*(writer(s) for s in sides))
    elapsed = time.perf_counter() - began
    for n, side in enumerate(sides):
        await check(side, per_session + 1, f"{name} concurrent session {n}")
    await client.drop_database(db)
    return sessions * per_session / elapsed


async def measure_side(uri: str, name: str, quick: bool) -> dict[str, float]:
    """One repetition of the append scenarios for one side (``ours`` or ``peer``), here."""
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, serverSelectionTimeoutMS=5000)
    calls1, calls10 = (60, 30) if quick else (200, 100)
    out: dict[str, float] = {}
    try:
        for batch, calls in ((1, calls1), (10, calls10)):
            p50, p99 = await append_latency(client, name, batch, calls)
            out[f"append{batch}_p50"], out[f"append{batch}_p99"] = p50, p99
        out["concurrent20"] = await concurrent(client, name, 20, 20 if quick else 50)
    finally:
        await client.close()
    return out


def side_env(tree: Path) -> dict[str, str]:
    """The environment of a side process: durable-agent from ``tree``'s ``src``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(REPO)])}


def run_side(uri: str, side: str, tree: Path, quick: bool) -> dict[str, float]:
    """:func:`measure_side` in a process of its own, importing durable-agent from ``tree``."""
    kind = "peer" if side == "peer" else "ours"
    cmd = [sys.executable, __file__, "--side", kind, "--uri", uri] + (["--quick"] if quick else [])
    done = subprocess.run(cmd, env=side_env(tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"side {side!r} failed:\n{done.stdout}\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def bench_sessions(
    uri: str, reps: int, quick: bool, before: Path | None = None
) -> dict[str, Any]:
    trees = {"ours": REPO, "peer": REPO, **({"before": before} if before is not None else {})}
    sides = list(trees)
    raw: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    for rep in range(reps):
        order = sides[rep % len(sides) :] + sides[: rep % len(sides)]  # take turns first
        for name in order:
            figures = await asyncio.to_thread(run_side, uri, name, trees[name], quick)
            for key, value in figures.items():
                raw[name].setdefault(key, []).append(value)
        print(f"  (3) repetition {rep + 1}/{reps} done", flush=True)
    for name, loads in (await interleaved_loads(uri, trees, reps * LOADS)).items():
        raw[name].update(loads)
    print(f"  (3) {reps * LOADS} rounds of loads done", flush=True)
    out = {
        "peer": "openai-agents MongoDBSession",
        "reps": reps,
        "params": {
            "append1_calls": 60 if quick else 200,
            "append10_calls": 30 if quick else 100,
            "load_sizes": list(SIZES),
            "load_rounds": reps * LOADS,
            "load_built_in_batches_of": BUILD_BATCH,
            "sides": sides,
            "concurrent_sessions": 20,
            "appends_per_session": 20 if quick else 50,
            "message_chars": len(TEXT),
        },
        "rows": rows(raw, "ours", "peer"),
        "raw": raw,
    }
    if before is not None:
        out["rows_before"] = rows(raw, "before", "peer")
        out["rows_now_over_before"] = rows(raw, "ours", "before")
    return out


def rows(raw: dict[str, dict[str, list[float]]], ours: str, peer: str) -> list[dict[str, Any]]:
    return [figure(n, unit, raw[ours][k], raw[peer][k], b) for k, n, unit, b in FIGURES]


SIZES = (1000, 10_000)
#: Rounds of loads per repetition (every side loads each size once a round).
LOADS = 20

#: (key in ``raw``, row name, unit, better)
FIGURES = [
    ("append1_p50", "append 1 message, p50", "ms", "lower"),
    ("append1_p99", "append 1 message, p99", "ms", "lower"),
    ("append10_p50", "append 10-message batch, p50", "ms", "lower"),
    ("append10_p99", "append 10-message batch, p99", "ms", "lower"),
    ("load1000_ms", "load 1k-message session", "ms", "lower"),
    ("load10000_ms", "load 10k-message session", "ms", "lower"),
    ("concurrent20", "20 concurrent sessions, 1-msg appends", "entries/s", "higher"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description="one side of comparison (3), as JSON")
    parser.add_argument("--side", choices=sorted(SIDES), required=True)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-loads", action="store_true", help="see serve_loads")
    args = parser.parse_args()
    if args.serve_loads:
        asyncio.run(serve_loads(args.uri, args.side))
    else:
        print(json.dumps(asyncio.run(measure_side(args.uri, args.side, args.quick))), flush=True)


if __name__ == "__main__":
    main()
