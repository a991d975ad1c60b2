"""Processes on one host share a FileStore root through per-file locks (docs/design.md#file-store).

Two OS processes append to one session at the same time; the load must hold every entry exactly
once, each writer's entries in the order it wrote them.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path

from durable_agent.stores import FileStore

PER_WRITER = 200

WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from durable_agent.ai import Message, TextContent
from durable_agent.session import MessageEntry
from durable_agent.stores import FileStore

root, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
T0 = datetime(2026, 1, 2, tzinfo=UTC)

def entry(i):
    text = f"{name} says {i} " + "x" * (i % 50)
    message = Message(role="user", content=[TextContent(text=text)], timestamp=T0)
    return MessageEntry(id=f"{name}-{i}", created_at=T0, message=message)

async def main():
    store = FileStore(root)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(count):
        batch = [entry(i)]
        await store.append_entries("shared", batch)
        if i % 7 == 0:
            await store.append_entries("shared", batch)  # a retry: must be a no-op

asyncio.run(main())
"""


def start_writer(root: Path, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), name, str(PER_WRITER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def run_writers(root: Path, names: list[str]) -> None:
    procs = [start_writer(root, name) for name in names]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.communicate(timeout=120)
        assert proc.returncode == 0


async def test_two_processes_append_to_one_session(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    await store.create_session("shared")
    await asyncio.to_thread(run_writers, tmp_path, ["a", "b"])

    ids = [e.id for e in await store.load_entries("shared")]
    assert len(ids) == 2 * PER_WRITER
    assert len(set(ids)) == len(ids)
    for name in ("a", "b"):
        assert [i for i in ids if i.startswith(f"{name}-")] == [
            f"{name}-{i}" for i in range(PER_WRITER)
        ]
    # the writers really interleaved (otherwise this test would prove nothing about locking)
    switches = sum(1 for x, y in itertools.pairwise(ids) if x[0] != y[0])
    assert switches > 1
    lines = (tmp_path / "shared.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert len(lines) == 2 * PER_WRITER + 2  # header, entries, and the empty piece after the end
