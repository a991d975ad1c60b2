"""The one-shot session commands: ``run``, ``sessions``, ``show`` and ``state``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.table import Table
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecution

from ..durable.agent import new
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionNotFoundError
from ..session.ids import new_id, validate_session_id
from ..session.tree import path
from ..session.views import transcript_view
from ..workflows import TemporalExecutor, connect_from_env, run_workflow_id
from ..workflows.types import SEARCH_ATTRIBUTE, RunState
from .render import RunPrinter, entry_json, message_summary, render_transcript, render_tree, short
from .settings import temporal_env
from .stores import list_sessions, open_store


class NotFound(Exception):
    """A session or run the command was pointed at does not exist (exit code 3)."""


__all__ = [
    "NotFound",
    "connect_cli",
    "has_pollers",
    "latest_run",
    "list_sessions_cmd",
    "query_state",
    "run_turn",
    "show_session",
]


async def connect_cli() -> Client:
    """A client as the environment (or a running ``dev``) says, with a readable failure."""
    env = temporal_env()
    try:
        return await connect_from_env(env)
    except Exception as exc:
        address = env.get("TEMPORAL_ADDRESS", "localhost:7233")
        raise ConnectionError(
            f"cannot reach Temporal at {address} ({exc}); start one with `durable-agent dev` "
            "or set TEMPORAL_ADDRESS"
        ) from exc


async def has_pollers(client: Client, task_queue: str) -> bool:
    """Whether any worker polls ``task_queue`` for workflow tasks right now."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(response.pollers)


def _print_json(console: Console, data: Any) -> None:
    """Plain JSON on the console's file: rich would wrap long strings into invalid JSON."""
    console.file.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    console.file.flush()


async def run_turn(
    console: Console,
    err: Console,
    *,
    session_id: str,
    text: str,
    store_spec: str,
    task_queue: str,
    agent_name: str,
    as_json: bool,
    limit: timedelta,
) -> int:
    """One turn on Temporal; Ctrl-C or the timeout cancels the run (what was stored stays)."""
    validate_session_id(session_id)
    opened = open_store(store_spec)
    try:
        client = await connect_cli()
        if not await has_pollers(client, task_queue):
            err.print(
                f"[yellow]warning:[/] no worker polls task queue {task_queue!r}; the run waits "
                "for one (start `durable-agent worker` or `durable-agent dev`)"
            )
        executor = TemporalExecutor(client, task_queue=task_queue)
        agent = await new(agent_name, store=opened.store, session_id=session_id, executor=executor)
        run_id = new_id()
        stream = await agent.run(text, run_id=run_id)
        printer = RunPrinter(console)
        stored: list[Entry] = []
        try:
            async with asyncio.timeout(limit.total_seconds()):
                async for event in stream.events():
                    stored += event.entries or []
                    if not as_json:
                        printer.handle(event)
        except TimeoutError:
            await stream.cancel()
            err.print(f"[red]error:[/] the run did not finish in {limit.total_seconds():.0f} s")
            return 1
        except asyncio.CancelledError:
            await asyncio.wait_for(stream.cancel(), 10)
            raise
        finally:
            printer.finish()
        messages = await stream.wait()
        if as_json:
            replies = [m for m in messages if m.role == "assistant"]
            _print_json(
                console,
                {
                    "session_id": session_id,
                    "run_id": run_id,
                    "workflow_id": run_workflow_id(session_id, run_id),
                    "leaf_id": agent.leaf_id,
                    "reply": replies[-1].text() if replies else "",
                    "entries": [entry_json(e) for e in stored],
                },
            )
        return 0
    finally:
        await opened.close()


async def list_sessions_cmd(console: Console, store_spec: str, as_json: bool) -> int:
    opened = open_store(store_spec)
    try:
        summaries = await list_sessions(opened.store)
        rows: list[dict[str, Any]] = []
        for s in summaries:
            entries = await opened.store.load_entries(s.id)
            last = next((e for e in reversed(entries) if isinstance(e, MessageEntry)), None)
            rows.append(
                {
                    "id": s.id,
                    "parent_id": s.parent_id,
                    "created_at": s.created_at.isoformat(),
                    "entries": len(entries),
                    "leaf_id": entries[-1].id if entries else "",
                    "last": message_summary(last.message) if last is not None else "",
                }
            )
        if as_json:
            _print_json(console, rows)
            return 0
        if not rows:
            console.print(f"no sessions in {opened.spec}")
            return 0
        table = Table(title=f"sessions in {opened.spec}", title_justify="left")
        widest = max(len(row["id"]) for row in rows)
        table.add_column("session", no_wrap=True, min_width=widest)
        table.add_column("parent", no_wrap=True, min_width=min(widest, 24))
        table.add_column("created", no_wrap=True, min_width=16)
        table.add_column("entries", no_wrap=True, min_width=7, justify="right")
        table.add_column("last message", no_wrap=True, overflow="ellipsis", max_width=48)
        for row in rows:
            table.add_row(
                row["id"],
                row["parent_id"] or "",
                row["created_at"][:16].replace("T", " "),
                str(row["entries"]),
                short(row["last"], 60),
            )
        console.print(table)
        return 0
    finally:
        await opened.close()


async def show_session(
    console: Console, session_id: str, store_spec: str, as_tree: bool, as_json: bool
) -> int:
    validate_session_id(session_id)
    opened = open_store(store_spec)
    try:
        try:
            entries = await opened.store.load_entries(session_id)
        except SessionNotFoundError:
            raise NotFound(f"no session {session_id!r} in {opened.spec}") from None
        leaf = entries[-1].id if entries else ""
        shown: Sequence[Entry] = entries if as_tree else transcript_view(path(entries, leaf))
        load_session = getattr(opened.store, "load_session", None)
        parent = (await load_session(session_id)).parent_id if load_session else None
        if as_json:
            _print_json(
                console,
                {
                    "session_id": session_id,
                    "parent_id": parent,
                    "leaf_id": leaf,
                    "entries": [entry_json(e) for e in shown],
                },
            )
        elif as_tree:
            console.print(render_tree(entries, leaf, f"session {session_id}"))
        else:
            fork = f", forked from {parent}" if parent else ""
            console.print(
                f"[bold]session {session_id}[/] · {len(entries)} entries · leaf {leaf}{fork}"
            )
            render_transcript(console, shown)
        return 0
    finally:
        await opened.close()


async def latest_run(client: Client, session_id: str) -> WorkflowExecution | None:
    """The most recently started run workflow of ``session_id`` (found by search attribute)."""
    sid = validate_session_id(session_id)
    query = f'{SEARCH_ATTRIBUTE}="{sid}" AND WorkflowType="durable_agent.run"'
    latest: WorkflowExecution | None = None
    async for execution in client.list_workflows(query):
        if latest is None or execution.start_time > latest.start_time:
            latest = execution
    return latest


async def query_state(console: Console, session_id: str, as_json: bool) -> int:
    client = await connect_cli()
    execution = await latest_run(client, session_id)
    if execution is None:
        raise NotFound(f"no runs of session {session_id!r} on this Temporal server")
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    try:
        state: RunState = await handle.query(
            "state", result_type=RunState, rpc_timeout=timedelta(seconds=15)
        )
    except Exception as exc:
        raise ConnectionError(
            f"the state query of {execution.id} was not answered ({exc}); queries need a worker "
            "polling the run's task queue"
        ) from exc
    status = execution.status.name if execution.status is not None else "UNKNOWN"
    if as_json:
        data = state.model_dump(mode="json")
        data.update(
            workflow_id=execution.id,
            workflow_run_id=execution.run_id,
            workflow_status=status,
            task_queue=execution.task_queue,
        )
        _print_json(console, data)
        return 0
    table = Table(title=f"latest run of {session_id}", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    rows = [
        ("workflow", execution.id),
        ("workflow status", status),
        ("run status", state.status),
        ("turns", str(state.turn_count)),
        ("leaf", state.leaf_id),
        ("pending tools", ", ".join(f"{c.name} ({c.id})" for c in state.pending_tool_calls) or "-"),
        ("new entries", ", ".join(state.new_entry_ids) or "-"),
        ("usage", f"{state.usage.input} in / {state.usage.output} out tokens"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    return 0
