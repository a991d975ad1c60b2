"""MongoStore after a writer process is SIGKILLed mid-append (docs/design.md#mongo-store): the
retry of the killed batch completes, once, while a follower reads the session."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.stores.mongo import MongoStore
from tests.mongo.helpers import entry, ids

pytestmark = pytest.mark.mongo

ROOT = Path(__file__).resolve().parents[2]

#: A writer process that appends ``n`` entries to ``s1`` and stops for good once its slot and
#: claims went in (before its batch document), printing ``claimed``: the test kills it there.
_KILLED_WRITER = """
import asyncio, sys, time
from pymongo import AsyncMongoClient, monitoring
from durable_agent.stores.mongo import MongoStore
from tests.mongo.helpers import entry

uri, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

class Stop(monitoring.CommandListener):
    claims = None
    def started(self, event):
        if event.command_name == "insert" and event.command["insert"].endswith("_claims"):
            self.claims = event.request_id
    def succeeded(self, event):
        if event.request_id == self.claims:
            print("claimed", flush=True)
            time.sleep(3600)
    def failed(self, event):
        pass

async def main():
    client = AsyncMongoClient(uri, event_listeners=[Stop()])
    await MongoStore(client[name]).append_entries("s1", [entry(f"e{i}") for i in range(n)])

asyncio.run(main())
"""


def _kill_after_claims(uri: str, name: str, n: int) -> None:
    """Run the writer until its claims are in, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, uri, name, str(n)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "claimed\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()


async def test_retry_of_a_killed_large_batch_lands_among_other_appends(
    mongo_uri: str, mongo_database: AsyncDatabase[Any]
) -> None:
    """A writer claimed a 1000-entry batch and was killed before its document went in. Its
    retry takes every claim over and stores the batch once, while another writer keeps
    appending after it and a follower reads the session. The follower fences the retry's slot
    once it has waited ``abandon_after`` for its document with a later one stored, so the retry
    must not spend that long between taking its slot and landing (moving the claims one round
    trip each did: every attempt was fenced until the append gave up)."""
    n, abandon = 1000, 1.0
    await MongoStore(mongo_database).create_session("s1")
    await asyncio.to_thread(_kill_after_claims, mongo_uri, mongo_database.name, n)
    follower = MongoStore(mongo_database, abandon_after=abandon)
    other = MongoStore(mongo_database, abandon_after=abandon)
    seen: list[str] = []
    others: list[str] = []
    done = asyncio.Event()

    async def follow() -> None:
        while not done.is_set():
            for seq, found in await follower.load_entries_after("s1", len(seen)):
                assert seq == len(seen) + 1
                seen.append(found.id)
            await asyncio.sleep(0.01)

    async def append_others() -> None:
        while not done.is_set():
            eid = f"o{len(others)}"
            await other.append_entries("s1", [entry(eid, parent=others[-1] if others else None)])
            others.append(eid)
            await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(follow()), asyncio.create_task(append_others())]
    batch = [entry(f"e{i}") for i in range(n)]
    try:
        await MongoStore(mongo_database, abandon_after=abandon).append_entries("s1", batch)
    finally:
        done.set()
        await asyncio.gather(*tasks)
    loaded = ids(await follower.load_entries("s1"))
    assert sorted(loaded) == sorted([*ids(batch), *others])
    start = loaded.index("e0")
    assert loaded[start : start + n] == ids(batch)  # one document: the batch whole, in order
    assert [eid for eid in loaded if eid.startswith("o")] == others
    assert [e.id for _, e in await follower.load_entries_after("s1", 0)] == loaded
    assert seen == loaded[: len(seen)]
