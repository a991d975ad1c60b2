"""Figure (c) of ``temporal_bench.py``: crash recovery.

A worker subprocess is SIGKILLed while a model call streams, and again while a slow tool runs; a new
worker subprocess is started at once; kill -> run completed (server) and kill -> ``wait()``
returned (client), with the executor's default ``Timeouts`` and with short ones. Target: under 5 s
plus the interrupted call's own duration. The worker subprocess is ``temporal_bench.py worker``,
which runs ``worker_main`` here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client

from _stats import summary
from _temporal_common import FIXED_USAGE, assistant_turns, fmt, queue_name, worker_options
from durable_agent import new, tool
from durable_agent.ai import ModelEvent, ModelRequest, Reply, ScriptedModel, ToolCall
from durable_agent.stores import FileStore
from durable_agent.workflows import (
    AgentSpec,
    TemporalExecutor,
    Timeouts,
    connect,
    create_worker,
    run_workflow_id,
)

__all__ = ["bench_crash", "figure_rows", "print_crash", "worker_main"]

ENTRY = Path(__file__).resolve().with_name("temporal_bench.py")  # its `worker` command


def short_timeouts(heartbeat: float) -> Timeouts:
    """The short settings: a short model heartbeat timeout, first retry after 0.1 s."""
    return Timeouts(
        model_heartbeat=heartbeat, retry_initial=0.1, retry_max=1.0, tool_heartbeat=heartbeat
    )


class WorkerProcess:
    """A worker subprocess (this script's ``worker`` command) and the lines it prints, timed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(
        cls, address: str, queue: str, store_dir: Path, call_seconds: float, passthrough: bool
    ) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ENTRY),
            "worker",
            "--address",
            address,
            "--task-queue",
            queue,
            "--store",
            str(store_dir),
            "--call-seconds",
            str(call_seconds),
            *(["--passthrough"] if passthrough else []),
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            self.lines.append((time.perf_counter(), line.decode().strip()))
            self._changed.set()
        self._changed.set()

    async def wait_for(self, prefix: str, within: float = 60.0) -> float:
        """When the worker printed a line starting with ``prefix``."""
        deadline = time.perf_counter() + within
        while True:
            for t, line in self.lines:
                if line.startswith(prefix):
                    return t
            if self._reader.done():
                raise RuntimeError(f"worker exited before printing {prefix!r}: {self.lines}")
            self._changed.clear()
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"worker did not print {prefix!r}: {self.lines}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def when(self, prefix: str) -> float | None:
        return next((t for t, line in self.lines if line.startswith(prefix)), None)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        await self._reader


async def crash_once(
    client: Client,
    address: str,
    store_dir: Path,
    timeouts: Timeouts | None,
    call_seconds: float,
    kill_after: float,
    passthrough: bool,
    kind: str = "model",
) -> dict[str, float]:
    """One run whose worker is killed ``kill_after`` s into the model call (``kind="model"``) or
    into the slow tool (``kind="tool"``); a new worker finishes it."""
    marker = "CALL" if kind == "model" else "TOOL"
    queue = queue_name("crash")
    first = await WorkerProcess.start(address, queue, store_dir, call_seconds, passthrough)
    second: WorkerProcess | None = None
    try:
        await first.wait_for("READY")
        store = FileStore(store_dir)
        executor = TemporalExecutor(
            client, task_queue=queue, timeouts=timeouts, execution_timeout=timedelta(minutes=5)
        )
        agent = await new(f"crash-{kind}", store=store, executor=executor)
        run_id = uuid.uuid4().hex[:12]
        stream = await agent.run("tell me something long", run_id=run_id)
        handle = client.get_workflow_handle(run_workflow_id(agent.session_id, run_id))
        server_done = asyncio.create_task(handle.result())
        call_started = await first.wait_for(f"{marker} 1")
        await asyncio.sleep(max(0.0, call_started + kill_after - time.perf_counter()))
        t_kill = time.perf_counter()
        first.proc.kill()  # SIGKILL, by PID
        second = await WorkerProcess.start(address, queue, store_dir, call_seconds, passthrough)
        await first.stop()
        await server_done
        t_server = time.perf_counter()
        messages = await stream.wait()
        t_client = time.perf_counter()
        entries = await store.load_entries(agent.session_id)
        roles = [getattr(getattr(e, "message", None), "role", None) for e in entries]
        expected = ["user", "assistant"] if kind == "model" else TOOL_ROLES
        if roles != expected or len(messages) != len(expected) - 1:
            raise RuntimeError(f"unexpected store after recovery: {roles}, {len(messages)} msgs")
        ready = second.when("READY")
        recall = second.when(marker)
        return {
            "kill_to_completed": t_server - t_kill,
            "kill_to_wait_returned": t_client - t_kill,
            "kill_to_new_worker_ready": (ready - t_kill) if ready else float("nan"),
            "kill_to_call_restarted": (recall - t_kill) if recall else float("nan"),
        }
    finally:
        await first.stop()
        if second is not None:
            await second.stop()


async def bench_crash(
    client: Client,
    address: str,
    root: Path,
    reps: int,
    call_seconds: float,
    kill_after: float,
    passthrough: bool,
    short_heartbeat: float,
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "reps": reps,
        "call_seconds": call_seconds,
        "kill_after": kill_after,
        "target_seconds": 5.0 + call_seconds,
    }
    settings = [("default", None), ("short", short_timeouts(short_heartbeat))]
    for (name, timeouts), kind in itertools.product(settings, ("model", "tool")):
        store_dir = root / f"crash-{name}-{kind}"
        runs = [
            await crash_once(
                client, address, store_dir, timeouts, call_seconds, kill_after, passthrough, kind
            )
            for _ in range(reps)
        ]
        t = timeouts or Timeouts()
        key = name if kind == "model" else f"{name}_tool"
        res[key] = {
            "timeouts": t.model_dump(),
            **{k: summary([r[k] for r in runs]) for k in runs[0]},
        }
    return res


def print_crash(res: dict[str, Any]) -> None:
    d = res["call_seconds"]
    print(
        f"\n(c) crash recovery: worker SIGKILLed {res['kill_after']:.1f} s into a {d:.1f} s "
        f"streaming model call / a {d:.1f} s tool, new worker subprocess started at once; "
        f"medians over {res['reps']} repetitions (min..max)"
    )
    for name in ("default", "short", "default_tool", "short_tool"):
        if name not in res:
            continue
        r = res[name]
        t = r["timeouts"]
        what = "tool" if name.endswith("_tool") else "model call"
        beat = t["tool_heartbeat"] if name.endswith("_tool") else t["model_heartbeat"]
        retry = "the tool's retry policy" if name.endswith("_tool") else "retry_initial="
        retry += "" if name.endswith("_tool") else f"{t['retry_initial']} s"
        print(
            f"  {what}, {name.removesuffix('_tool')} Timeouts (heartbeat={beat} s, "
            f"{retry}; worker sticky timeout 2 s):"
        )
        print(
            f"      kill -> new worker ready        {fmt(r['kill_to_new_worker_ready'], 's', 1, 2)}"
        )
        print(
            f"      kill -> {what + ' restarted':<24}{fmt(r['kill_to_call_restarted'], 's', 1, 2)}"
        )
        print(f"      kill -> run completed (server)  {fmt(r['kill_to_completed'], 's', 1, 2)}")
        print(f"      kill -> wait() returned         {fmt(r['kill_to_wait_returned'], 's', 1, 2)}")
        over = r["kill_to_completed"]["median"] - d
        verdict = "within" if over < 5.0 else "OVER"
        print(
            f"      recovery beyond the re-run call: {over:.2f} s [{verdict} the 5 s + call target]"
        )


# -- the worker subprocess ---------------------------------------------------------------------


class AnnouncingModel:
    """A ScriptedModel streaming one long reply; prints ``CALL <attempt>`` when a call starts."""

    def __init__(self, call_seconds: float) -> None:
        text = "The quick brown fox jumps over the lazy dog. " * 8  # 360 chars
        chunks = 40
        self.inner = ScriptedModel(
            lambda _request: Reply(
                text=text,
                chunk_size=len(text) // chunks,
                chunk_delay=call_seconds / chunks,
                usage=FIXED_USAGE,
            )
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        print(f"CALL {activity.info().attempt}", flush=True)
        async for event in self.inner.stream(request):
            yield event


TOOL_ROLES = ["user", "assistant", "tool_result", "assistant"]


def slow_tool(call_seconds: float) -> Any:
    """A tool that runs ``call_seconds``; prints ``TOOL <attempt>`` when an attempt starts."""

    @tool
    async def slow(k: int) -> str:
        """Works for a while."""
        print(f"TOOL {activity.info().attempt}", flush=True)
        await asyncio.sleep(call_seconds)
        return f"worked {k}"

    return slow


def tool_then_answer(request: ModelRequest) -> Reply:
    if assistant_turns(request) == 0:
        return Reply(tool_calls=[ToolCall(id="slow-1", name="slow", arguments={"k": 1})])
    return Reply(text="done")


async def worker_main(args: argparse.Namespace) -> None:
    client = await connect(args.address)
    tool_agent = AgentSpec(
        model=ScriptedModel(tool_then_answer), tools=[slow_tool(args.call_seconds)]
    )
    worker = await create_worker(
        client,
        task_queue=args.task_queue,
        store=FileStore(args.store),
        agents={
            "crash-model": AgentSpec(model=AnnouncingModel(args.call_seconds)),
            "crash-tool": tool_agent,
        },
        **worker_options(args.passthrough),
    )
    async with worker:
        print("READY", flush=True)
        await asyncio.Event().wait()


def figure_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures of (c), as (label, value) rows for the before/after table."""
    rows: list[tuple[str, str]] = []
    d = c["call_seconds"]
    for key, label in [
        ("default", "model, default"),
        ("short", "model, short"),
        ("default_tool", "tool, default"),
        ("short_tool", "tool, short"),
    ]:
        if key in c:
            done = c[key]["kill_to_completed"]["median"]
            rows.append(
                (
                    f"(c) crash {label}: kill->done (beyond call)",
                    f"{done:.2f} s ({done - d:+.2f} s)",
                )
            )
    return rows
