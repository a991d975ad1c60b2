"""Benchmark: what a guarded append costs against a plain one (docs/design.md#store-contract).

A decision that no run takes, and the input of a busy-checked run start, used to be stored with
``append_entries``; they are now stored with ``append_if_last`` (stored only if the session's
newest entry is still the one the caller read). This measures both on each built-in store,
side by side in one run: the same one-entry append after the session's newest entry, to
sessions already holding ``--sizes`` entries, the two kinds taking turns append by append (so
load on a shared machine hits both alike). The figures are the p50 and p95 of each and the
ratio of the p50s.

``before`` is the plain append (what those writes were), ``after`` the guarded one, in two
cases: ``chained``, the store object appending wrote the entry it expects newest (a run's
input after its own last reply, on one worker), and ``other``, another store object on the same
files or database wrote it just before (a server's decision after a worker's reply).
MemoryStore (one object only) and FileStore (a temporary directory, fsync on) check the
condition under the lock they hold anyway. MongoStore skips the check when chained (its slot
directly follows the expected entry's, nothing can come between) and otherwise reads that
entry's claim and document by ``_id`` (and the outline from there when something lies between):
the design targets MongoDB, where those are index lookups; the figures here are FerretDB's,
which scans its collection for an ``_id`` (started by this script, as ``bench/mongo_bench.py``
does; ``--uri`` measures another server).

Run: ``.venv/bin/python bench/guarded_bench.py [--appends 40] [--sizes 10,1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.ferretdb

from pymongo import AsyncMongoClient
from tests.support.ferretdb import start_ferretdb

from durable_agent.ai import user_message
from durable_agent.session import GuardedStore, MessageEntry
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.stores.mongo import MongoStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stats import pct


def entry(entry_id: str, parent: str | None) -> MessageEntry:
    return MessageEntry(id=entry_id, parent_id=parent, message=user_message(f"m {entry_id}"))


async def fill(store: GuardedStore, sid: str, size: int) -> str:
    """The session ``sid`` with ``size`` entries, in appends of 10; its newest entry's ID."""
    await store.create_session(sid)
    parent: str | None = None
    for start in range(0, size, 10):
        batch = []
        for n in range(start, min(start + 10, size)):
            batch.append(entry(f"{sid}-{n}", parent))
            parent = batch[-1].id
        await store.append_entries(sid, batch)
    assert parent is not None
    return parent


async def measure(
    store: GuardedStore, other: GuardedStore, size: int, appends: int
) -> dict[str, list[float]]:
    """Milliseconds per one-entry append to a session of ``size`` entries, plain (``before``)
    and guarded (``after``), taking turns. When ``other`` is another store object, it stores
    an entry before each timed append, as a worker stores the reply a server's decision
    follows; when it is ``store``, the appends chain (a run's own)."""
    sid = f"s{size}-{id(other) != id(store)}"
    last = await fill(store, sid, size)
    times: dict[str, list[float]] = {"before": [], "after": []}
    for n in range(appends):
        for side in ["before", "after"] if n % 2 == 0 else ["after", "before"]:
            if other is not store:
                between = entry(f"{sid}-y{n}-{side}", last)
                await other.append_entries(sid, [between])
                last = between.id
            new = entry(f"{sid}-x{n}-{side}", last)
            began = time.perf_counter()
            if side == "before":
                await store.append_entries(sid, [new])
            else:
                assert await store.append_if_last(sid, [new], last)
            times[side].append((time.perf_counter() - began) * 1000)
            last = new.id
    return times


@contextlib.asynccontextmanager
async def stores(uri: str | None) -> AsyncIterator[list[tuple[str, Callable[[], Any]]]]:
    with tempfile.TemporaryDirectory(prefix="guarded-bench-") as tmp:
        ferretdb = None if uri else start_ferretdb(Path(tmp) / "ferretdb")
        mongo_uri = uri or (ferretdb.uri if ferretdb else "")
        client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri)
        try:
            db = client[f"guarded_bench_{time.time_ns()}"]
            yield [
                ("memory", MemoryStore),
                ("file", lambda: FileStore(Path(tmp) / "sessions")),
                ("mongo", lambda: MongoStore(db)),
            ]
        finally:
            await client.close()
            if ferretdb is not None:
                ferretdb.stop()


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"{'store':7} {'last by':8} {'entries':>7} {'before p50':>11} {'after p50':>10}"
        f" {'ratio':>6} {'before p95':>11} {'after p95':>10}  (ms per one-entry append)"
    )
    async with stores(args.uri) as kinds:
        for name, make in kinds:
            store = make()
            others = (
                [("chained", store)]
                if name == "memory"
                else [("chained", store), ("other", make())]
            )
            for case, other in others:
                for size in sizes:
                    t = await measure(store, other, size, args.appends)
                    b50, a50 = pct(t["before"], 0.5), pct(t["after"], 0.5)
                    print(
                        f"{name:7} {case:8} {size:>7} {b50:>11.2f} {a50:>10.2f} {a50 / b50:>5.2f}x"
                        f" {pct(t['before'], 0.95):>11.2f} {pct(t['after'], 0.95):>10.2f}"
                    )
                if other is not store:
                    await other.aclose()
            await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=40, help="appends of each kind per size")
    parser.add_argument("--sizes", default="10,1000", help="session sizes, comma-separated")
    parser.add_argument("--uri", help="measure this MongoDB server instead of starting FerretDB")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
