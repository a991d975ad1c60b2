"""``durable-agent demo``: the whole story on a real Temporal server, offline, in about a minute.

It starts a dev server (SQLite under the data directory, reused across runs) and a worker
subprocess, then drives one conversation on a FileStore and narrates each step as it happens:
a streamed turn in process, the same session resumed on Temporal with a tool call and its receipts,
the worker SIGKILLed while a slow tool runs and replaced with the run finishing anyway, a branch, a
fork, a compaction and the transcript tree. Everything it started is stopped by PID at the end.
Each run uses a new session ID, so running it twice is safe.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from ..agent import model
from ..durable import Agent, RunStream, new
from ..session import last_turn, new_id
from ..stores import FileStore
from ..workflows import SEARCH_ATTRIBUTE, TemporalExecutor, Timeouts, connect, run_workflow_id
from ..workflows.config import data_dir, read_server_info, remove_server_info
from .approvals import show_approvals
from .config import DEMO_APP
from .demo_app import AGENT, SLOW_TOOL, demo_spec, model_choice
from .dev import DevServer, advertise, start_dev_server, workflows_url
from .processes import (
    ManagedProcess,
    ProcessError,
    ServerLock,
    start_worker,
    stop_on_signals,
    stop_orphan,
)
from .render import console, render_tree, run_command
from .run import RunPrinter

__all__ = ["demo", "run_demo"]


def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the server and worker up until Ctrl-C.")
    ] = False,
) -> None:
    """Run the offline demo end to end: a real Temporal dev server, a worker that gets killed
    mid-run and replaced, branch, fork, compaction and the transcript tree."""
    _interrupt_on(signal.SIGTERM, signal.SIGHUP)
    raise typer.Exit(run_command(lambda: run_demo(console, keep=keep)))


def _interrupt_on(*signals: signal.Signals) -> None:
    """Treat these signals as Ctrl-C, so a closed terminal or a ``kill`` still runs the cleanup
    that stops the server and workers (asyncio turns SIGINT into cancelling the command)."""

    def forward(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    for sig in signals:
        signal.signal(sig, forward)


DEMO_TIMEOUTS = Timeouts(model_heartbeat=2.0, tool_heartbeat=2.0, retry_initial=0.1, retry_max=1.0)
"""Heartbeats of 2 s: a killed worker's activity is retried elsewhere about 2 s after the kill."""


@dataclass
class Stack:
    """What the demo started, stopped in reverse order whatever happens."""

    root: Path
    console: Console
    lock: ServerLock
    queue: str
    """The run's own task queue: two demos sharing a server never serve each other's runs, and
    a run an interrupted demo left open is never picked up later."""
    workers: list[ManagedProcess] = field(default_factory=list)
    server: DevServer | None = None
    owns_server: bool = False

    async def __aenter__(self) -> Stack:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.console.print()
        self.console.rule("[bold]Cleaning up", align="left")
        await asyncio.to_thread(self.stop)

    def stop(self) -> None:
        for worker in reversed(self.workers):
            if worker.running():
                code = worker.stop()
                self.console.print(f"  stopped worker {worker.pid} (exit {code})")
        if self.owns_server and self.server is not None and self.server.process is not None:
            code = self.server.process.stop()
            self.console.print(f"  stopped Temporal server {self.server.process.pid} (exit {code})")
            remove_server_info(self.root, os.getpid())
        self.lock.release()


async def _server(stack: Stack) -> DevServer:
    """Our own dev server, or the one a running ``durable-agent dev`` owns on the same file."""
    root, console = stack.root, stack.console
    if not stack.lock.try_acquire():
        info = read_server_info(root)
        if info is None:
            raise ProcessError(
                f"another durable-agent process holds {stack.lock.path} but advertises no server; "
                "stop it, or set XDG_DATA_HOME to use another data directory"
            )
        console.print(f"Reusing the dev server of process {info.owner_pid} at {info.address}")
        return DevServer(info.address, info.ui_url, None)
    orphan = stop_orphan(root, root / "temporal.db")
    if orphan is not None:
        console.print(f"Stopped Temporal server {orphan}, left behind by an interrupted run")
    t0 = time.monotonic()
    server = await start_dev_server(root)
    assert server.process is not None
    stack.server = server
    stack.owns_server = True
    advertise(root, server, stack.queue)
    console.print(
        f"Temporal dev server {server.process.pid} up in {time.monotonic() - t0:.1f} s: "
        f"gRPC {server.address}, Web UI {server.ui_url}, data {root / 'temporal.db'}"
    )
    return server


async def _worker(stack: Stack, server: DevServer, n: int, indent: str = "") -> ManagedProcess:
    t0 = time.monotonic()
    worker = await start_worker(
        name=f"worker-{n}",
        app_ref=DEMO_APP,
        store_spec=f"file:{stack.root / 'sessions'}",
        task_queue=stack.queue,
        address=server.address,
        log_path=stack.root / "logs" / f"demo-worker-{n}.log",
        ready_dir=stack.root / "run",
    )
    stack.workers.append(worker)
    stack.console.print(
        f"{indent}Worker {n} (pid {worker.pid}) polling task queue {stack.queue} "
        f"after {time.monotonic() - t0:.1f} s"
    )
    return worker


def _step(console: Console, n: int, title: str) -> None:
    console.print()
    console.rule(f"[bold]{n} · {title}", align="left")


async def _ask(console: Console, agent: Agent, text: str, *, edit: bool = False) -> RunPrinter:
    """Ask ``text`` (``edit``: instead of the last question) and print the run."""
    console.print(f"  [bold cyan]you ▸[/] {text}")
    stream = await (agent.edit(text) if edit else agent.run(text))
    printer = RunPrinter(console)
    async for event in stream.events():
        printer.handle(event)
    printer.finish()
    return printer


async def _started_activity(client: Client, workflow_id: str) -> tuple[str, int]:
    """Poll the run until the slow tool's activity is running on a worker: (identity, attempt)."""
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        desc = await handle.describe()
        for pending in desc.raw_description.pending_activities:
            if (
                pending.activity_type.name == "durable_agent.call_tool"
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            ):
                return pending.last_worker_identity, pending.attempt
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the {SLOW_TOOL} activity of {workflow_id} never started")


async def _crash_turn(
    console: Console, stack: Stack, server: DevServer, client: Client, agent: Agent
) -> None:
    text = "Crunch the Q3 sales numbers, please."
    console.print(f"  [bold cyan]you ▸[/] {text}")
    run_id = new_id()
    workflow_id = run_workflow_id(agent.session_id, run_id)
    stream: RunStream = await agent.run(text, run_id=run_id)
    printer = RunPrinter(console)
    killed_at: float | None = None
    async for event in stream.events():
        printer.handle(event)
        inner = event.agent
        if (
            killed_at is None
            and inner is not None
            and inner.type == "tool_execution_start"
            and inner.tool_name == SLOW_TOOL
        ):
            identity, attempt = await _started_activity(client, workflow_id)
            victim = stack.workers[-1]
            console.print(
                f"  [bold red]✗ SIGKILL worker {victim.pid}[/] while {SLOW_TOOL} runs on it "
                f"(activity attempt {attempt} on {identity})"
            )
            victim.kill()
            killed_at = time.monotonic()
            replacement = await _worker(stack, server, len(stack.workers) + 1, "  ")
            console.print(
                f"  [bold]↻ replacement worker {replacement.pid}[/] is up; Temporal notices the "
                "dead worker's missed heartbeat and retries the tool there"
            )
    printer.finish()
    await stream.wait()
    if killed_at is None:
        console.print(f"  [yellow]the model never called {SLOW_TOOL}: no worker was killed[/]")
        return
    console.print(
        f"  [bold green]✓ run finished[/] {time.monotonic() - killed_at:.1f} s after the kill: "
        f"same workflow {workflow_id}, one tool result stored, nothing lost"
    )


async def _wait_for_ctrl_c(console: Console) -> None:
    stop = stop_on_signals(signal.SIGINT, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    try:  # said once a Ctrl-C is caught here
        console.print("\n[bold]Server and worker kept running[/]: press Ctrl-C to stop them.")
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _edit_fork_compact(console: Console, agent: Agent, session_id: str) -> Agent:
    """Steps 4-6: a branch (edit the last question), a fork, a compaction; returns the fork."""
    _step(console, 4, "A branch: edit the last question")
    turn = last_turn(agent.transcript())
    assert turn is not None
    question = turn.start
    console.print(
        f"  leaf moved {agent.leaf_id} → {question.parent_id or '(root)'} (just before "
        f"“{question.message.text()}”); the old answer stays in the tree"
    )
    await _ask(console, agent, "Crunch the Q4 numbers instead.", edit=True)

    _step(console, 5, "A fork: a new session that starts from this path")
    child = await agent.fork(f"{session_id}-fork")
    console.print(
        f"  forked {child.session_id} (parent {session_id}) with {len(child.entries())} "
        "copied entries; the two now evolve independently"
    )
    await _ask(console, child, "Turn this into a one-line note for the team.")

    _step(console, 6, "A compaction: summarize, keep the last turn verbatim")
    before = len(agent.messages())
    compaction = await agent.compact(keep_turns=1)
    if compaction is None:
        console.print("  nothing to compact")
    else:
        console.print(
            f"  stored compaction {compaction.id} (about {compaction.tokens_before} tokens "
            f"summarized): the model now sees {len(agent.messages())} messages instead of "
            f"{before}; nothing was deleted"
        )
        console.print(f"  [yellow]summary ▸[/] {compaction.summary}")
    await _ask(console, agent, "What do we know so far?")

    return child


async def _show_tree_and_ui(
    console: Console,
    client: Client,
    server: DevServer,
    sessions: tuple[Agent, Agent],
    keep: bool,
) -> None:
    """Steps 8-9: the transcript trees, then where the runs are in the Temporal Web UI."""
    agent, child = sessions
    session_id = agent.session_id
    _step(console, 8, "The transcript tree")
    console.print(
        render_tree(agent.entries(), agent.leaf_id, f"session {session_id}", console.width)
    )
    console.print(
        render_tree(child.entries(), child.leaf_id, f"session {child.session_id}", console.width)
    )

    _step(console, 9, "Inspect the runs in the Temporal Web UI")
    runs = [w async for w in client.list_workflows(f'{SEARCH_ATTRIBUTE}="{session_id}"')]
    console.print(f"  {len(runs)} workflows tagged {SEARCH_ATTRIBUTE}={session_id}:")
    if server.ui_url:
        console.print(f"  [bold link]{workflows_url(server.ui_url, session_id)}[/]", soft_wrap=True)
        if not keep:
            console.print(
                "  (the server stops with the demo; `durable-agent demo --keep` or "
                "`durable-agent dev` serve the same database, runs included)"
            )
    console.print(
        f"  Read it back later: durable-agent show {session_id} --tree   "
        f"(or: durable-agent sessions)"
    )
    if keep:
        await _wait_for_ctrl_c(console)


def _introduce(console: Console, root: Path) -> None:
    console.print(
        Panel.fit(
            "[bold]durable-agent demo[/]: a conversation that survives a crashed worker.\n"
            f"Data directory: {root}",
            border_style="cyan",
        )
    )
    spec_name = model_choice()
    if spec_name is None:
        console.print(
            "Model: no API key set, so the offline ScriptedModel answers "
            "(set OPENAI_API_KEY or ANTHROPIC_API_KEY to use a real model)."
        )
    else:
        console.print(f"Model: {spec_name} (from the environment).")


async def _local_then_temporal(
    console: Console, client: Client, queue: str, store: FileStore, session_id: str
) -> Agent:
    """Steps 1-2: a turn in process, then the same session on Temporal; returns its handle."""
    _step(console, 1, "A streamed turn, in process (token by token)")
    spec = demo_spec()
    local = await new(
        model(spec.model),
        store=store,
        session_id=session_id,
        tools=tuple(spec.tools),
        system_prompt=spec.system_prompt,
    )
    await _ask(console, local, "Hi! What can you do?")
    await local.close()

    _step(console, 2, "The same session resumed on Temporal: a tool call and its receipts")
    executor = TemporalExecutor(
        client,
        task_queue=queue,
        execution_timeout=timedelta(minutes=10),
        timeouts=DEMO_TIMEOUTS,
    )
    agent = await new(AGENT, store=store, session_id=session_id, executor=executor)
    console.print(
        f"  resumed at leaf {agent.leaf_id} with {len(agent.entries())} stored entries; "
        "each reply streams live from the worker, then its receipt (entry ID + leaf) arrives"
    )
    printer = await _ask(console, agent, "What's the weather in Paris?")
    console.print(
        f"  [dim]{printer.updates} live updates came from the worker's delta channel in the "
        "store, none of them in workflow history[/dim]"
    )
    return agent


async def run_demo(console: Console, *, keep: bool = False) -> int:
    """The demo; returns the exit code. ``keep`` leaves the server and worker up until Ctrl-C,
    to look around the Web UI."""
    t_start = time.monotonic()
    root = data_dir()
    root.mkdir(parents=True, exist_ok=True)
    _introduce(console, root)
    session_id = f"demo-{new_id()[:8]}"
    store = FileStore(root / "sessions")
    queue = f"durable-agent-{session_id}"  # session IDs start with "demo-"
    async with Stack(root, console, ServerLock(root), queue) as stack:
        server = await _server(stack)
        await _worker(stack, server, 1)
        client = await connect(server.address)
        console.print(f"Session [bold]{session_id}[/] in FileStore {store.root}")
        agent = await _local_then_temporal(console, client, stack.queue, store, session_id)

        _step(console, 3, "A worker killed mid-run, replaced, and the run finishes anyway")
        await _crash_turn(console, stack, server, client, agent)

        child = await _edit_fork_compact(console, agent, session_id)
        _step(console, 7, "Approvals and messages while the agent works")
        await show_approvals(console, client, agent)
        await _show_tree_and_ui(console, client, server, (agent, child), keep)
    console.print(f"\n[bold green]Demo complete[/] in {time.monotonic() - t_start:.1f} s.")
    return 0
