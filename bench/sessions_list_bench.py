"""Benchmark: ``durable-agent sessions`` on a FileStore of many long sessions (issue 15.18).

Before, the command loaded every entry of every session (to count entries and show the last
message); now it reads one page of session records (``list_sessions``: each file's header line).
The bench builds ``--sessions`` sessions of ``--entries`` entries each, then times the command as
a user runs it (a subprocess, interpreter start included), on the ``src/`` of git revision
``--baseline`` (default ``main``) and on this tree, side by side: the default page (100) and
every session (``--limit`` = all) for the new code. The baseline runs with no ``--limit`` too: a
revision before the change (``51a59e8~1``) lists every session, a later one (``main``) its first
page, as this tree does. A second table times the listing alone in
process (no interpreter start): the old per-session record and entries loads against
``list_sessions``.

Run: ``.venv/bin/python bench/sessions_list_bench.py`` (``--sessions 1000 --entries 50``,
``--repeat 3``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from durable_agent.ai import user_message
from durable_agent.session import MessageEntry
from durable_agent.stores import FileStore

ROOT = Path(__file__).resolve().parents[1]


async def build(root: Path, sessions: int, entries: int) -> None:
    store = FileStore(root, fsync=False)
    for i in range(sessions):
        sid = f"s{i:05d}"
        await store.create_session(sid)
        batch: list[MessageEntry] = []
        parent: str | None = None
        for j in range(entries):
            entry = MessageEntry(
                id=f"{i:05d}{j:05d}", parent_id=parent, message=user_message(f"message {j} " * 8)
            )
            batch.append(entry)
            parent = entry.id
        await store.append_entries(sid, batch)


async def in_process(root: Path, sessions: int, repeat: int) -> list[tuple[str, float]]:
    """The listing alone, without interpreter start: what the old command did per session
    (its record, then every entry), against one page and all records of ``list_sessions``."""
    store = FileStore(root, fsync=False)
    ids = await asyncio.to_thread(lambda: sorted(p.stem for p in root.glob("*.jsonl")))

    async def before() -> None:
        for sid in ids:
            await store.load_session(sid)
            await store.load_entries(sid)

    cases = [
        ("before: records + all entries", before),
        ("after: list_sessions page", lambda: store.list_sessions()),
        ("after: list_sessions all", lambda: store.list_sessions(limit=sessions)),
    ]
    out = []
    for label, call in cases:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            await call()
            times.append(time.perf_counter() - start)
        out.append((label, statistics.median(times)))
    return out


def export_src(ref: str, into: Path) -> Path:
    """The ``src/`` directory of git revision ``ref``, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


COMMAND = (
    "import importlib, durable_agent.cli as c; "
    "(c if hasattr(c, 'main') else importlib.import_module('durable_agent.cli.__main__')).main()"
)
"""The command on either side: a tree from before its entry point moved into the package has it
in ``durable_agent.cli.__main__`` (and no ``python -m durable_agent``)."""


def time_command(src: Path, args: list[str], repeat: int, home: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "XDG_DATA_HOME": str(home)}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", COMMAND, *args],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", "--baseline", dest="baseline", default="main")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "sessions"
        asyncio.run(build(store, opts.sessions, opts.entries))
        before_src = export_src(opts.baseline, work / "baseline")
        spec = ["--store", f"file:{store}", "--json"]
        rows = [
            ("start only (sessions --help)", ROOT / "src", ["sessions", "--help"]),
            (f"before ({opts.baseline}), no --limit", before_src, ["sessions", *spec]),
            ("after, no --limit (first 100)", ROOT / "src", ["sessions", *spec]),
            (
                f"after, all ({opts.sessions})",
                ROOT / "src",
                ["sessions", *spec, "--limit", str(opts.sessions)],
            ),
        ]
        print(
            f"durable-agent sessions, FileStore, {opts.sessions} sessions x {opts.entries} "
            f"entries (median of {opts.repeat}, subprocess incl. interpreter start)"
        )
        for label, src, args in rows:
            seconds = time_command(src, args, opts.repeat, work)
            print(f"  {label:<30} {seconds:7.2f} s")
        print("in process, the listing alone (same store, same run)")
        for label, seconds in asyncio.run(in_process(store, opts.sessions, opts.repeat)):
            print(f"  {label:<30} {seconds:7.3f} s")


if __name__ == "__main__":
    main()
