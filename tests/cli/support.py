"""Helpers for driving the ``durable-agent`` command in subprocesses and terminals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.polling import poll

CLI = [sys.executable, "-m", "durable_agent.cli"]

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
