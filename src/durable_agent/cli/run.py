"""``durable-agent run``: one turn on Temporal, printed as it happens (or as JSON at the end).

Everything that can be checked is checked before the session is created: the message, the ID,
``--leaf``, Temporal, and a worker on another store; a new session is created by its first run
once the worker has checked the agent, so an agent the worker does not have creates nothing.
Ctrl-C or ``--timeout`` cancels the run; what it stored stays. :func:`open_agent` is also how
``chat`` opens its session.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console

from ..ai import user_message
from ..durable import Agent, PayloadTooLargeError, RunStream, new
from ..session import (
    Entry,
    MessageEntry,
    SessionNotFoundError,
    new_id,
    validate_session_id,
)
from ..workflows import TemporalExecutor, run_workflow_id
from ..workflows.executor import DEFAULT_PAYLOAD_LIMIT
from .config import (
    AddressOpt,
    AgentOpt,
    JsonOpt,
    NamespaceOpt,
    NotFound,
    OpenedStore,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    TemporalFlags,
    UsageError,
    VerboseOpt,
    connect,
    display_store,
    open_store,
    queue_for,
    resolve_store_spec,
)
from .render import RunPrinter, console, entry_json, err, flags_from, print_json, run_command
from .worker import check_workers

__all__ = [
    "CANCEL_WAIT",
    "check_leaf",
    "input_entry",
    "open_agent",
    "run",
    "run_turn",
]


def run(
    session_id: Annotated[str, typer.Argument(help="Session to run on (created if unknown).")],
    text: Annotated[str, typer.Argument(help="The user message ('-' reads it from stdin).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    as_json: JsonOpt = False,
    timeout: Annotated[
        float, typer.Option(min=0.0, help="Seconds before giving up (and cancelling the run).")
    ] = 300.0,
    leaf: Annotated[
        str | None,
        typer.Option(
            "--leaf",
            help="Run from this entry (an earlier branch; `root` starts a new one) instead of "
            "the last stored entry.",
            show_default=False,
        ),
    ] = None,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run one turn on Temporal and print it as it happens (or --json at the end)."""
    flags = flags_from(address, namespace, profile, verbose)
    message = sys.stdin.read() if text == "-" else text
    code = run_command(
        lambda: run_turn(
            console,
            err,
            session_id=session_id,
            text=message,
            store_spec=resolve_store_spec(store),
            task_queue=queue_for(task_queue, flags),
            agent_name=agent,
            as_json=as_json,
            limit=timedelta(seconds=timeout),
            leaf=leaf,
            flags=flags,
        )
    )
    raise typer.Exit(code)


CANCEL_WAIT = 10.0
"""Seconds a timed-out ``run`` waits for its cancellation: with no worker polling, the run only
ends when one comes, so the command must not wait for that."""

_HEADER_BYTES = 200
"""Room for the ID, parent and timestamp the run stamps on the input entry."""


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


async def open_agent(
    warn: Console,
    opened: OpenedStore,
    *,
    session_id: str,
    task_queue: str,
    agent_name: str,
    flags: TemporalFlags | None,
) -> tuple[Agent, TemporalExecutor]:
    """The session's handle on Temporal, after checking that a worker on the command's store
    polls ``task_queue``; also its executor."""
    client = await connect(flags)
    await check_workers(warn, client, task_queue, opened)
    executor = TemporalExecutor(client, task_queue=task_queue)
    agent = await new(agent_name, store=opened.store, session_id=session_id, executor=executor)
    return agent, executor


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
    """One turn on Temporal; the exit code (see the module docstring)."""
    validate_session_id(session_id)
    entry = input_entry(text)
    opened = open_store(store_spec)
    try:
        start_at = await check_leaf(opened, session_id, leaf) if leaf is not None else None
        agent, _ = await open_agent(
            err,
            opened,
            session_id=session_id,
            task_queue=task_queue,
            agent_name=agent_name,
            flags=flags,
        )
        if start_at is not None:
            await agent.branch(start_at)
        return await _stream_turn(console, err, agent, entry, as_json, limit)
    finally:
        await opened.close()


async def _stream_turn(
    console: Console,
    err: Console,
    agent: Agent,
    entry: MessageEntry,
    as_json: bool,
    limit: timedelta,
) -> int:
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
        print_json(
            console,
            {
                "session_id": agent.session_id,
                "run_id": run_id,
                "workflow_id": run_workflow_id(agent.session_id, run_id),
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
