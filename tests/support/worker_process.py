"""A durable-agent Temporal worker in its own process, for the crash-recovery tests.

The tests start it with ``python -m tests.support.worker_process``, kill it with SIGKILL at a chosen
point and start a fresh one that finishes the run. Everything it does is a function of its command
line and of the request it gets, so two processes answer the same conversation the same way:

- the store is a FileStore on ``--root`` (or a MongoStore on ``--mongo-uri``/``--mongo-db``);
- agent ``crashy``'s ScriptedModel answers from the request (a **function** script): while the
  conversation since the last user message has fewer than ``--steps`` tool results it calls tool
  ``work`` with the next step number, then it answers ``finished: <user text>``;
- ``--crash`` picks where this process stops and waits to be killed, writing a marker file in
  ``--markers`` first so the test knows it is there:

  ``model``         while the first model reply streams (marker ``model-streaming``);
  ``before-append`` after the first model call completed, in ``append_entries`` of its
                    assistant message, before anything is written (marker ``before-append``);
  ``tool``          while tool ``work`` runs (marker ``tool-running``);
  ``after-append``  in ``append_entries`` of the first tool result, after the write and before
                    the activity reports back (marker ``after-append``): ``call_tool`` commits
                    its own result, so this is a tool that committed but did not complete;
  ``model-committed`` in ``append_entries`` of the first assistant message, after the write
                    (``call_model`` commits its own reply): committed, not completed.
  ``input-committed`` in ``append_entries`` of the run's input, after the write: the local
                    append landed, its workflow task never completes (marker
                    ``input-committed``).
  ``decision-committed`` in ``append_entries`` of an approval decision (the ``decide``
                    update's local commit), after the write: stored, the update not answered
                    (marker ``decision-committed``).

Two more modes race a zombie attempt against its retry (``zombie`` parks before writing the
first reply until the file ``go-zombie`` appears, then writes it and creates ``zombie-committed``;
``zombie-retry`` writes its first reply only once ``zombie-committed`` exists). In these modes the
first reply's text names the mode, so the store shows whose reply won.

``parallel`` (with ``--parallel`` on the fresh worker) makes the first turn call every step at
once: step 1 returns, step 2 parks (marker ``parallel-running``): a crash mid-batch.

Every model call and tool run appends a line to ``calls.log`` in ``--markers`` (``model <pid>``,
``tool <step> <pid>``): the side-effect counter the tests check across processes.

``--approval`` makes each ``work`` call wait for a person's decision.

Without ``--crash`` the process just works (the "fresh worker"). SIGTERM shuts it down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from durable_agent import ApprovalDecision, Reply, ScriptedModel, ToolCall, tool
from durable_agent.ai import ModelEvent, ModelRequest, RetryPolicy
from durable_agent.session import Entry, MessageEntry, Store
from durable_agent.session.deltas import LiveStore
from durable_agent.workflows import AgentSpec, connect, create_worker
from durable_agent.workflows.worker import DEFAULT_MAX_CONCURRENT_ACTIVITIES

CRASH_POINTS = ("model", "before-append", "tool", "after-append", "model-committed")
TASK_MODES = ("input-committed", "decision-committed")
ZOMBIE_MODES = ("zombie", "zombie-retry")
BATCH_MODES = ("parallel",)
MARKERS = {
    "model": "model-streaming",
    "before-append": "before-append",
    "tool": "tool-running",
    "after-append": "after-append",
    "model-committed": "model-committed",
    "input-committed": "input-committed",
    "decision-committed": "decision-committed",
    "zombie": "zombie-parked",
    "zombie-retry": "retry-parked",
    "parallel": "parallel-running",
}
CALLS_LOG = "calls.log"
AGENT = "crashy"
STREAMED_TEXT = "Working on it, one careful step at a time. " * 2


def _touch(markers: Path, name: str) -> None:
    tmp = markers / f".{name}.tmp"
    tmp.write_text(str(os.getpid()))
    tmp.replace(markers / name)


async def _park() -> None:
    """Wait here until the test kills the process."""
    await asyncio.sleep(3600)


def _count(markers: Path, what: str) -> None:
    """One line per side effect; O_APPEND keeps lines from several processes whole."""
    with (markers / CALLS_LOG).open("a") as log:
        log.write(f"{what} {os.getpid()}\n")


def _exists(path: Path) -> bool:
    return path.exists()


async def _until_exists(path: Path) -> None:
    """Wait for another process to create ``path`` (a cross-process signal: a file is all two
    processes share here, so this polls it)."""
    while not _exists(path):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def responder(steps: int, slow: bool, tag: str = "", parallel: bool = False) -> Any:
    """The model's script: a pure function of the request (same answer in every process)."""

    def respond(request: ModelRequest) -> Reply:
        last_user = 0
        for i, m in enumerate(request.messages):
            if m.role == "user":
                last_user = i
        user_text = request.messages[last_user].text() if request.messages else ""
        done = sum(1 for m in request.messages[last_user:] if m.role == "tool_result")
        if parallel and done == 0:
            calls = [
                ToolCall(id=f"call-{user_text}-{k}", name="work", arguments={"step": k})
                for k in range(1, steps + 1)
            ]
            return Reply(text=STREAMED_TEXT, tool_calls=calls)
        if done < steps:
            step = done + 1
            return Reply(
                text=STREAMED_TEXT + tag if step == 1 else f"step {step}",
                tool_calls=[
                    ToolCall(id=f"call-{user_text}-{step}", name="work", arguments={"step": step})
                ],
                chunk_delay=0.25 if slow and step == 1 else 0.0,
            )
        return Reply(text=f"finished: {user_text}")

    return respond


class MarkingModel:
    """The scripted model, writing a marker once its first reply has streamed a delta."""

    def __init__(self, inner: ScriptedModel, markers: Path, crash: str | None) -> None:
        self.inner = inner
        self.markers = markers
        self.crash = crash

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        _count(self.markers, "model")
        marked = False
        async for event in self.inner.stream(request):
            if self.crash == "model" and not marked and event.type == "text_delta":
                _touch(self.markers, MARKERS["model"])
                marked = True
            yield event


class CrashingStore:
    """Wraps the real store; parks in ``append_entries`` at the chosen crash point."""

    def __init__(self, inner: Store, markers: Path, crash: str | None) -> None:
        self.inner = inner
        self.markers = markers
        self.crash = crash
        self.fired = False

    async def create_session(self, session_id: str, parent_id: str | None = None) -> Any:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        roles = {e.message.role for e in entries if isinstance(e, MessageEntry)}
        crash, first = self.crash, not self.fired and "assistant" in roles
        if first and crash == "before-append":
            self.fired = True
            _touch(self.markers, MARKERS["before-append"])
            await _park()
        if first and crash == "zombie":
            self.fired = True
            _touch(self.markers, MARKERS["zombie"])
            await _until_exists(self.markers / "go-zombie")
            await self.inner.append_entries(session_id, entries)
            _touch(self.markers, "zombie-committed")
            return
        if first and crash == "zombie-retry":
            self.fired = True
            _touch(self.markers, MARKERS["zombie-retry"])
            await _until_exists(self.markers / "zombie-committed")
        await self.inner.append_entries(session_id, entries)
        if not self.fired and crash == "after-append" and "tool_result" in roles:
            self.fired = True
            _touch(self.markers, MARKERS["after-append"])
            await _park()
        if not self.fired and crash == "input-committed" and "user" in roles:
            self.fired = True
            _touch(self.markers, MARKERS["input-committed"])
            await _park()
        decided = any(isinstance(e, ApprovalDecision) for e in entries)
        if not self.fired and crash == "decision-committed" and decided:
            self.fired = True
            _touch(self.markers, MARKERS["decision-committed"])
            await _park()
        if first and crash == "model-committed":
            self.fired = True
            _touch(self.markers, MARKERS["model-committed"])
            await _park()


def build_store(args: argparse.Namespace) -> Store:
    if args.mongo_uri:
        from pymongo import AsyncMongoClient

        from durable_agent.stores.mongo import MongoStore

        client: AsyncMongoClient[Any] = AsyncMongoClient(args.mongo_uri)
        return MongoStore(client[args.mongo_db])
    from durable_agent.stores import FileStore

    return FileStore(args.root, fsync=False)


def build_agent(args: argparse.Namespace, markers: Path) -> AgentSpec:
    crash = args.crash

    @tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.05), approval=args.approval)
    async def work(step: int) -> str:
        """Do one step of the work."""
        _count(markers, f"tool {step}")
        if crash == "parallel" and step == 2:
            _touch(markers, MARKERS["parallel"])
            await _park()
        if crash == "tool":
            _touch(markers, MARKERS["tool"])
            await _park()
        return f"step {step} done"

    tag = f" [{crash}]" if crash in ZOMBIE_MODES else ""
    parallel = args.parallel or crash in BATCH_MODES
    lm = ScriptedModel(responder(args.steps, slow=crash == "model", tag=tag, parallel=parallel))
    return AgentSpec(model=MarkingModel(lm, markers, crash), tools=[work])


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--root", help="FileStore root")
    parser.add_argument("--mongo-uri")
    parser.add_argument("--mongo-db", default="durable_agent")
    parser.add_argument("--markers", required=True)
    parser.add_argument("--crash", choices=CRASH_POINTS + ZOMBIE_MODES + BATCH_MODES + TASK_MODES)
    parser.add_argument("--parallel", action="store_true", help="one turn of parallel calls")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--approval", action="store_true", help="a person approves each step")
    parser.add_argument("--live", action="store_true", help="publish live deltas (the store's)")
    args = parser.parse_args(argv)
    if not args.root and not args.mongo_uri:
        parser.error("give --root or --mongo-uri")
    markers = Path(args.markers)

    client = await connect(args.address, namespace=args.namespace)
    inner = build_store(args)
    store = CrashingStore(inner, markers, args.crash)
    # A frozen zombie must not hold an activity poll open: the server would hand the call's
    # retry to it (and the next, one per poller) instead of to the retry worker.
    slots = 1 if args.crash == "zombie" else DEFAULT_MAX_CONCURRENT_ACTIVITIES
    worker = await create_worker(
        client,
        task_queue=args.task_queue,
        store=store,
        live_deltas=inner.live_deltas() if args.live and isinstance(inner, LiveStore) else None,
        agents={AGENT: build_agent(args, markers)},
        workflow_failure_exception_types=[Exception],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=1),
        max_concurrent_activities=slots,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with worker:
        _touch(markers, f"ready-{os.getpid()}")
        await stop.wait()


if __name__ == "__main__":
    Path(sys.argv[sys.argv.index("--markers") + 1]).mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(main())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # pitfall 10: no interpreter-exit abort in the SDK
