"""Counters a load worker process keeps and the benchmark reads: Mongo ops and activity waits.

- **Mongo ops**: a PyMongo ``CommandListener`` registered before the worker opens its store counts
  the data commands (insert, find, update, delete, findAndModify, aggregate, getMore, count,
  distinct) the store's client sends; handshakes, pings and ``endSessions`` are left out. Counted
  in each client (every worker's and the benchmark's own), so it does not depend on the server
  reporting ``serverStatus.opcounters`` (FerretDB has none).
- **Activity schedule-to-start**: the tool and model code of the load agent note, when they begin
  to run inside their activity, how long ago the server scheduled that attempt
  (``activity.info().current_attempt_scheduled_time``). A tool runs first thing in ``call_tool``,
  so its figure is the activity's wait to start; the model runs in ``call_model`` after the
  activity loaded the session path, so its figure includes that store read. The history's
  ``ActivityTaskStarted`` is
  stamped when the task is handed to a worker, which for an activity dispatched eagerly (in the
  workflow task's reply, the SDK's default when the worker has a free slot) is the scheduling
  instant itself, so history reads 0 there while the activity may still wait in the worker.

A daemon thread writes the figures as JSON to ``$DURABLE_AGENT_LOAD_STATS`` every 0.2 s, stamped
with the time it read them; a reader that wants everything up to a moment waits for a write
stamped after it (:func:`stats_after`). The CLI leaves with ``os._exit``, so there is no flush at
exit: a stopped or SIGKILLed worker's figures are those of its last write.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import monitoring

__all__ = [
    "DATA_COMMANDS",
    "STATS_ENV",
    "OpCounter",
    "WorkerStats",
    "note_activity_start",
    "read_stats",
    "stats_after",
    "start_from_env",
]

STATS_ENV = "DURABLE_AGENT_LOAD_STATS"
DATA_COMMANDS = frozenset(
    {
        "insert",
        "find",
        "update",
        "delete",
        "findandmodify",
        "aggregate",
        "getmore",
        "count",
        "distinct",
    }
)
FLUSH_EVERY = 0.2


class OpCounter(monitoring.CommandListener):
    """Counts the data commands a client completed (successfully or not)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def _done(self, name: str) -> None:
        if name.lower() in DATA_COMMANDS:
            with self._lock:
                self.count += 1

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event.command_name)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event.command_name)


class WorkerStats:
    """This process's counters, flushed to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ops = OpCounter()
        self.activity_waits: dict[str, list[float]] = {"tool": [], "model": []}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def flush(self) -> None:
        with self._lock:
            waits = {kind: list(values) for kind, values in self.activity_waits.items()}
            data = {"ops": self.ops.count, "activity_waits": waits, "written_at": time.time()}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def start(self) -> None:
        monitoring.register(self.ops)  # every client created from now on (the store's) reports
        self.flush()
        threading.Thread(target=self._loop, name="load-stats", daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_EVERY):
            self.flush()

    def note_wait(self, kind: str, seconds: float) -> None:
        with self._lock:
            self.activity_waits.setdefault(kind, []).append(seconds)


_current: WorkerStats | None = None


def start_from_env() -> WorkerStats | None:
    """Start counting if ``$DURABLE_AGENT_LOAD_STATS`` names a file (once per process)."""
    global _current
    path = os.environ.get(STATS_ENV)
    if _current is None and path:
        _current = WorkerStats(Path(path))
        _current.start()
    return _current


def note_activity_start(kind: str) -> None:
    """Called by the load agent's ``tool`` and ``model`` code: record this attempt's wait."""
    from temporalio import activity

    if _current is None or not activity.in_activity():
        return
    scheduled = activity.info().current_attempt_scheduled_time
    _current.note_wait(kind, (datetime.now(UTC) - scheduled).total_seconds())


def read_stats(path: Path) -> dict[str, Any]:
    """What a worker last flushed (zeros if it never did)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"ops": 0, "activity_waits": {"tool": [], "model": []}}
    return data


async def stats_after(path: Path, moment: float, *, within: float = 10.0) -> dict[str, Any]:
    """The worker's figures as of a write stamped after ``moment`` (``time.time()``), so every
    command and wait completed before ``moment`` is in them; polled within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        data = read_stats(path)
        if float(data.get("written_at", 0.0)) > moment:
            return data
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} not written after {moment} within {within} s")
        await asyncio.sleep(FLUSH_EVERY / 4)  # the probe's interval, not a synchronisation sleep
