"""Helpers for driving the ``durable-agent`` command in subprocesses and terminals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.support.polling import poll, wait_until

CLI = [sys.executable, "-m", "durable_agent"]

ISOLATE = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "DURABLE_AGENT_STORE",
    "DURABLE_AGENT_TASK_QUEUE",
    "DURABLE_AGENT_DATA_DIR",
    "DURABLE_AGENT_APP",
    "DURABLE_AGENT_MODEL",
    "MONGODB_URI",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
)


def cli_env(data_home: Path, **extra: str) -> dict[str, str]:
    """An environment with a private data directory and none of the caller's service settings
    (so a developer's TEMPORAL_ADDRESS or API key cannot leak into the test)."""
    env = {k: v for k, v in os.environ.items() if k not in ISOLATE}
    env.update(
        XDG_DATA_HOME=str(data_home),
        COLUMNS="200",
        NO_COLOR="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run_cli(
    args: Sequence[str], env: dict[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run one command to completion (a hard timeout, so a hang fails instead of blocking)."""
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def wait_dead(pids: Sequence[int], within: float = 15.0) -> list[int]:
    """The PIDs still alive once ``within`` seconds have passed (polling, not sleeping blind)."""
    poll(lambda: not any(alive(p) for p in pids), within=within)
    return [p for p in pids if alive(p)]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def plain(text: str) -> str:
    """Terminal output without escape sequences and carriage returns."""
    return ANSI.sub("", text)


def in_order(text: str, markers: Sequence[str]) -> list[str]:
    """The markers missing from ``text`` or found out of order (empty means all good)."""
    problems: list[str] = []
    position = 0
    for marker in markers:
        found = text.find(marker, position)
        if found < 0:
            problems.append(marker if marker not in text else f"{marker} (out of order)")
        else:
            position = found + len(marker)
    return problems


@dataclass
class Dev:
    """A running ``durable-agent dev``: the environment that finds it, its output and the
    ``server.json`` it advertises."""

    env: dict[str, str]
    proc: subprocess.Popen[str]
    log: Path
    info: dict[str, Any]


@contextmanager
def running_dev(
    home: Path, *args: str, until: str = "durable-agent chat my-session", **extra_env: str
) -> Iterator[Dev]:
    """``durable-agent dev`` with its data under ``home``, from when its output shows ``until``
    (by default its banner's last line) to the end of the block; then it must stop cleanly
    (exit 0, its server gone, its advertisement and workers' ready files removed)."""
    env = cli_env(home, **extra_env)
    log = home / "dev.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "dev", *args], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        wait_until(
            lambda: until in log.read_text() or proc.poll() is not None,
            within=90,
            what="dev to start",
            interval=0.002,  # a stop right as it says it is up must be graceful too
        )
        assert proc.poll() is None, log.read_text()
        info = json.loads((home / "durable-agent" / "server.json").read_text())
        yield Dev(env, proc, log, info)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, log.read_text()
    assert wait_dead([info["pid"]]) == [], "dev stopped its server"
    assert not (home / "durable-agent" / "server.json").exists()
    left = list((home / "durable-agent" / "run").glob("*.ready*"))
    assert left == [], "the workers' ready files go with them (a SIGKILLed one's too)"


@dataclass
class WorkerProcess:
    """A ``durable-agent worker`` subprocess, its ready file and its output file."""

    proc: subprocess.Popen[bytes]
    ready: Path
    log: Path
    _out: IO[bytes]

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        """SIGTERM (a no-op if it is gone), then its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self._out.close()


@contextmanager
def worker_process(
    env: dict[str, str], workdir: Path, *args: str, name: str = "worker"
) -> Iterator[WorkerProcess]:
    """``durable-agent worker --ready-file <workdir>/<name>.ready ARGS``, up (its ready file
    written) for the block, stopped after it."""
    ready, log = workdir / f"{name}.ready", workdir / f"{name}.log"
    out = log.open("wb")
    proc = subprocess.Popen(
        [*CLI, "worker", "--ready-file", str(ready), *args],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    worker = WorkerProcess(proc, ready, log, out)
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, within=60, what=name)
        assert proc.poll() is None, log.read_text()
        yield worker
    finally:
        worker.stop()
