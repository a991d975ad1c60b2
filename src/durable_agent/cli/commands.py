"""The one-shot session commands: ``run``, ``show`` and ``state`` (``sessions``: sessionscmd)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecution

from ..ai.messages import user_message
from ..durable.agent import Agent, new
from ..durable.errors import PayloadTooLargeError
from ..durable.stream import RunStream
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionNotFoundError
from ..session.ids import new_id, validate_session_id
from ..session.store import RetentionStore
from ..session.tree import path
from ..session.views import transcript_view
from ..workflows import (
    SEARCH_ATTRIBUTE,
    RunState,
    TemporalExecutor,
    connect_from_env,
    run_workflow_id,
)
from ..workflows.executor import DEFAULT_PAYLOAD_LIMIT
from .render import RunPrinter, entry_json, render_transcript, render_tree
from .storeid import mismatch, store_id
from .stores import OpenedStore, open_store
from .target import TemporalFlags, client_env, display_store


class NotFound(Exception):
    """A session or run the command was pointed at does not exist (exit code 3)."""


__all__ = [
    "NotFound",
    "StoreMismatchError",
    "UsageError",
    "drop_if_empty",
    "session_exists",
    "check_leaf",
    "check_queue",
    "input_entry",
    "connect_cli",
    "has_pollers",
    "poller_identities",
    "latest_run",
    "query_state",
    "run_turn",
    "show_session",
]


async def connect_cli(flags: TemporalFlags | None = None) -> Client:
    """A client as the flags, the environment, a profile or a running ``dev`` say, with a
    readable failure that names the address and where it came from."""
    env, settings = client_env(flags or TemporalFlags())
    try:
        return await connect_from_env(env)
    except Exception as exc:
        raise ConnectionError(
            f"cannot reach Temporal at {settings.address} ({exc}); start one with "
            "`durable-agent dev`, or pass --address / set TEMPORAL_ADDRESS"
        ) from exc


async def poller_identities(client: Client, task_queue: str) -> list[str]:
    """The identities of the workers polling ``task_queue`` for workflow tasks right now."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return [p.identity for p in response.pollers]


async def has_pollers(client: Client, task_queue: str) -> bool:
    """Whether any worker polls ``task_queue`` for workflow tasks right now."""
    return bool(await poller_identities(client, task_queue))


class StoreMismatchError(Exception):
    """The workers on the queue advertise another store's ID than the command's store: a run
    would be stored where the command cannot see it (exit code 1, before anything is created)."""


async def check_queue(err: Console, client: Client, task_queue: str, opened: OpenedStore) -> None:
    """Warn when no worker polls the queue; :class:`StoreMismatchError` when the workers use
    another store (compared by store ID: specs differ between a host and a container)."""
    identities = await poller_identities(client, task_queue)
    if not identities:
        err.print(
            f"[yellow]warning:[/] no worker polls task queue {escape(repr(task_queue))}; runs "
            "wait for one (start `durable-agent worker` or `durable-agent dev`)",
            soft_wrap=True,
        )
        return
    try:
        own = await store_id(opened.store, create=False)
    except Exception:  # the store's own failure surfaces on first use, with its message
        return
    if mismatch(own, identities):
        raise StoreMismatchError(
            f"the worker(s) on task queue {task_queue!r} use another store than this command "
            f"({display_store(opened.spec)}): give both the same --store"
        )


def _print_json(console: Console, data: Any) -> None:
    """Plain JSON on the console's file: rich would wrap long strings into invalid JSON."""
    console.file.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    console.file.flush()


class UsageError(ValueError):
    """A command-line argument that cannot be used (exit code 2)."""


CANCEL_WAIT = 10.0
"""Seconds a timed-out ``run`` waits for its cancellation: with no worker polling, the run only
ends when one comes, so the command must not wait for that."""


def input_entry(text: str, payload_limit: int = DEFAULT_PAYLOAD_LIMIT) -> MessageEntry:
    """The run's input, checked before anything is created or stored: not empty, valid UTF-8
    (a non-UTF-8 argument arrives as lone surrogates) and under the payload limit."""
    if not text.strip():
        raise UsageError("the message is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"the message is not valid UTF-8 (at character {exc.start})") from None
    entry = MessageEntry(message=user_message(text))
    size = len(entry.model_dump_json().encode("utf-8")) + _HEADER_BYTES
    if size > payload_limit:
        raise PayloadTooLargeError(
            f"the message is {size} bytes encoded, over the {payload_limit}-byte payload limit"
        )
    return entry


_HEADER_BYTES = 200
"""Room for the ID, parent and timestamp the run stamps on the input entry."""


async def check_leaf(opened: OpenedStore, session_id: str, leaf: str) -> str:
    """``--leaf``: ``root`` or a stored entry ID of the session (checked before any write)."""
    if leaf == "root":
        return ""
    try:
        entries = await opened.store.load_entries(session_id)
    except SessionNotFoundError:
        raise NotFound(f"no session {session_id!r} in {display_store(opened.spec)}") from None
    if leaf not in {e.id for e in entries}:
        raise NotFound(f"no entry {leaf!r} in session {session_id!r}")
    return leaf


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
    leaf: str | None = None,
    flags: TemporalFlags | None = None,
) -> int:
    """One turn on Temporal; Ctrl-C or the timeout cancels the run (what was stored stays).

    Everything that can be checked is checked before the session is created (the message, the
    ID, ``--leaf``, Temporal, a worker on another store); a new session whose first run failed
    before storing anything (an agent the worker does not have) is removed again.
    """
    validate_session_id(session_id)
    entry = input_entry(text)
    opened = open_store(store_spec)
    try:
        start_at = await check_leaf(opened, session_id, leaf) if leaf is not None else None
        client = await connect_cli(flags)
        await check_queue(err, client, task_queue, opened)
        existed = await session_exists(opened, session_id)
        executor = TemporalExecutor(client, task_queue=task_queue)
        agent = await new(agent_name, store=opened.store, session_id=session_id, executor=executor)
        try:
            if start_at is not None:
                await agent.branch(start_at)
            return await _stream_turn(console, err, agent, entry, as_json, limit)
        except BaseException:
            if not existed:
                await drop_if_empty(opened, session_id)
            raise
    finally:
        await opened.close()


async def session_exists(opened: OpenedStore, session_id: str) -> bool:
    """Whether the store has the session (before a command creates it)."""
    try:
        await opened.store.load_entries(session_id)
    except SessionNotFoundError:
        return False
    return True


async def drop_if_empty(opened: OpenedStore, session_id: str) -> None:
    """Remove a session this command created if nothing was stored in it (best effort)."""
    store = opened.store
    if not isinstance(store, RetentionStore):
        return
    with contextlib.suppress(Exception):
        if not await store.load_entries(session_id):
            await store.delete_session(session_id)


async def _stream_turn(
    console: Console,
    err: Console,
    agent: Agent,
    entry: MessageEntry,
    as_json: bool,
    limit: timedelta,
) -> int:
    session_id = agent.session_id
    run_id = new_id()
    stream = await agent.run(entry, run_id=run_id)
    printer = RunPrinter(console)
    stored: list[Entry] = []
    try:
        async with asyncio.timeout(limit.total_seconds()):
            async for event in stream.events():
                stored += event.entries or []
                if not as_json:
                    printer.handle(event)
    except TimeoutError:
        printer.finish()
        ended = await _cancel(stream)
        err.print(
            f"[red]error:[/] the run did not finish in {limit.total_seconds():g} s; "
            + (
                "it was cancelled"
                if ended
                else "cancellation was requested (it takes effect when a worker picks the run up)"
            ),
            soft_wrap=True,
        )
        return 1
    except asyncio.CancelledError:
        await _cancel(stream)
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


async def _cancel(stream: RunStream) -> bool:
    """Cancel the run, waiting at most :data:`CANCEL_WAIT`; whether it ended in that time."""
    try:
        await asyncio.wait_for(stream.cancel(), CANCEL_WAIT)
    except TimeoutError:
        return False
    except Exception:  # the run failed while cancelling: it ended
        return True
    return True


async def show_session(
    console: Console, session_id: str, store_spec: str, as_tree: bool, as_json: bool
) -> int:
    validate_session_id(session_id)
    opened = open_store(store_spec)
    try:
        try:
            entries = await opened.store.load_entries(session_id)
        except SessionNotFoundError:
            raise NotFound(f"no session {session_id!r} in {display_store(opened.spec)}") from None
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


async def query_state(
    console: Console, session_id: str, as_json: bool, flags: TemporalFlags | None = None
) -> int:
    client = await connect_cli(flags)
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
