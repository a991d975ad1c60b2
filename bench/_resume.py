"""A cold resume at seq 9,990 of a 10,000-entry FileStore session against a full load, measured
in a process of its own, as a fresh server process resumes a client (``http_bench.py`` runs it).

``python bench/_resume.py build ROOT`` writes the session under ``ROOT``;
``python bench/_resume.py measure ROOT [--src DIR] [--reps 5]`` imports durable-agent from
``DIR`` (default: this tree's ``src``) and prints ``{"full", "cold", "warm", "src"}`` (seconds,
the least of ``reps``). Every read is measured alike: a fresh ``FileStore`` object (no read mark,
no append index), the garbage collector run before the clock starts, and the read's result held
until the clock stopped, so freeing a load's 10,000 entries is charged to no read (an unheld
result is freed by the executor thread whenever it next runs, in the middle of the next read).
``warm`` is a second read by the store object of the cold one: a follower's mark.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SESSION = "big"


async def build(root: Path) -> None:
    from durable_agent.session import MessageEntry
    from durable_agent.stores import FileStore

    store = FileStore(root)
    await store.create_session(SESSION)
    parent = None
    for _ in range(100):  # 100 batches of 100 chained user messages
        batch = []
        for i in range(100):
            entry = MessageEntry.model_validate(
                {
                    "id": uuid.uuid4().hex[:16],
                    "parent_id": parent,
                    "message": {"role": "user", "content": [{"type": "text", "text": f"m{i}"}]},
                }
            )
            batch.append(entry)
            parent = entry.id
        await store.append_entries(SESSION, batch)


async def timed(read: Callable[[], Awaitable[Any]]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    held = await read()
    took = time.perf_counter() - t0
    del held
    await asyncio.sleep(0.05)  # let the executor thread drop its references too
    return took


async def measure(root: Path, reps: int) -> dict[str, Any]:
    import durable_agent
    from durable_agent.stores import FileStore

    async def after(store: FileStore) -> list[Any]:
        got = await store.load_entries_after(SESSION, 9990)
        assert [seq for seq, _ in got] == list(range(9991, 10001))
        return got

    full, cold, warm = [], [], []
    for _ in range(reps):
        full.append(await timed(lambda: FileStore(root).load_entries(SESSION)))
        store = FileStore(root)  # no mark: what a fresh server process has
        cold.append(await timed(lambda: after(store)))  # noqa: B023 (awaited at once)
        warm.append(await timed(lambda: after(store)))  # noqa: B023
    return {
        "full": min(full),
        "cold": min(cold),
        "warm": min(warm),
        "src": str(Path(durable_agent.__file__).parent.parent),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["build", "measure"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--src", type=Path, default=HERE.parent / "src")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    if args.what == "build":
        asyncio.run(build(args.root))
    else:
        print(json.dumps(asyncio.run(measure(args.root, args.reps))))


if __name__ == "__main__":
    main()
