"""The ``durable-agent serve`` process of ``http_bench.py``: started from a tree's ``src``, its
store and live-delta reads counted inside it (``_serve_counted.py``), its CPU read from ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from _servers import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

__all__ = ["Served", "cpu_seconds", "serving"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Served:
    """One ``serve`` process: its URL, PID and reads counted (``_serve_counted.py``)."""

    url: str
    pid: int
    counts: Path

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    async def reads(self) -> dict[str, int]:
        """The process's store and live-delta reads so far."""
        self.counts.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)  # the serve process this bench started
        for _ in range(200):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                got: dict[str, int] = json.loads(self.counts.read_text())
                return got
            await asyncio.sleep(0.05)
        raise RuntimeError("the serve process did not write its counts")


@contextlib.asynccontextmanager
async def serving(
    root: Path, address: str, queue: str, src: Path = REPO / "src"
) -> AsyncIterator[Served]:
    port = free_port()
    counts = root.parent / f"counts-{port}.json"
    argv = [sys.executable, str(HERE / "_serve_counted.py"), "--src", str(src)]
    argv += ["--counts", str(counts), "--", "serve", "--port", str(port)]
    argv += ["--store", f"file:{root}", "--address", address, "--task-queue", queue]
    argv += ["--agent", "bench"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/v1/sessions")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        yield Served(url, proc.pid, counts)
    finally:
        proc.terminate()
        proc.wait(10)
