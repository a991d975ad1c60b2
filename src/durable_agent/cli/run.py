"""``durable-agent run``: one turn on Temporal, printed as it happens (or as JSON at the end).

All that can be checked is, before anything is created (the message, the ID, ``--leaf``,
Temporal, a worker on another store). A run going on the session (any process's; one too new to
be listed fails the run) refuses a run from its tail or calls. Ctrl-C cancels it, and so does
--timeout, a bound on the agent's work: its clock stops while the run waits for a person.

:class:`RunPrinter` prints a run's events, here and in ``chat``, ``approve`` and ``demo``, with
their receipts (the entry ID and new leaf under each stored message); ``message_update`` deltas
as they come (on Temporal a batch per live write, which :class:`~.render.Reveal` writes out at the
pace it came), an update with ``restart`` (a retried model call) starting the line over.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from temporalio.client import Client

from ..ai import Message, user_message
from ..durable import Agent, ApprovalPendingError, Event, RunActiveError, RunStream, new
from ..durable.limits import check_entry
from ..session import Entry, MessageEntry, SessionNotFoundError, new_id, validate_session_id
from ..session.approvals import PendingItem
from ..session.render import call_text, short
from ..session.views import open_calls_at
from ..workflows import TemporalExecutor, run_workflow_id
from ..workflows.executor import DEFAULT_PAYLOAD_LIMIT
from ..workflows.search import creation_when_asked, running_runs
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
from .render import PEOPLE, Reveal, console, entry_json, err, flags_from, print_json, run_command
from .worker import check_workers

__all__ = [
    "CANCEL_REQUESTED",
    "CANCEL_WAIT",
    "RunPrinter",
    "cancel_run",
    "open_agent",
    "refuse_busy",
    "run",
]


def run(
    session_id: Annotated[str, typer.Argument(help="Session to run on (created if unknown).")],
    text: Annotated[str, typer.Argument(help="The user message ('-' reads it from stdin).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    as_json: JsonOpt = False,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=86400.0,
            help="Seconds the agent may work, then the run is cancelled (a person's decision "
            "does not count).",
        ),
    ] = 300.0,
    leaf: Annotated[
        str | None,
        typer.Option(help="Run from this entry (an earlier branch; `root` starts a new one)."),
    ] = None,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run one turn on Temporal and print it as it happens (or --json at the end)."""
    flags = flags_from(address, namespace, profile, verbose)
    text = sys.stdin.read() if text == "-" else text
    code = run_command(
        lambda: run_turn(session_id, text, store, task_queue, agent, as_json, timeout, leaf, flags)
    )
    raise typer.Exit(code)


CANCEL_WAIT = 10.0  # seconds: with no worker polling, a cancelled run ends only when one comes
CANCEL_REQUESTED = "cancellation was requested (it takes effect when a worker picks the run up)"


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
    check_entry(entry, "the message", payload_limit)
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


async def refuse_busy(client: Client, agent: Agent) -> None:
    """:class:`RunActiveError` while a run goes on the session: a run from its tail would take
    the going run's unanswered calls for interrupted ones (docs/design.md#repair-and-reconcile)."""
    sid = agent.session_id  # its runs only, not a deleted one's (docs/design.md#retention)
    if going := await running_runs(client, sid, creation_when_asked(agent.store, sid)):
        what = "decide its calls (durable-agent approvals" if agent.pending_approvals() else ""
        wait = what or "wait for its end (durable-agent state"  # a person, or the run
        raise RunActiveError(
            f"session {sid!r} has a run going ({going[0]}): {wait} {sid}), "
            "or start from another entry (--leaf)"
        )


async def run_turn(
    session_id: str,
    text: str,
    store: str | None,
    task_queue: str | None,
    agent_name: str,
    as_json: bool,
    seconds: float,
    leaf: str | None,
    flags: TemporalFlags | None,
) -> int:
    """One turn on Temporal, as ``run``'s options ask; the exit code (the module docstring)."""
    validate_session_id(session_id)
    entry = input_entry(text)
    opened = open_store(resolve_store_spec(store))
    try:
        start_at = await check_leaf(opened, session_id, leaf) if leaf is not None else None
        agent, executor = await open_agent(
            err,
            opened,
            session_id=session_id,
            task_queue=queue_for(task_queue, flags),
            agent_name=agent_name,
            flags=flags,
        )
        calls = open_calls_at(agent.entries(), start_at or "")
        if busy := start_at in (None, agent.leaf_id) or bool(calls):
            await refuse_busy(executor.client, agent)  # the tail, or calls a run goes on with
        if start_at is not None and start_at != agent.leaf_id:
            await agent.branch(start_at)
        if waiting := agent.pending_approvals():  # a parked turn: a decision goes on with it
            raise ApprovalPendingError(_decide(session_id, waiting) + ", or --leaf ENTRY")
        return await _stream_turn(agent, entry, as_json, timedelta(seconds=seconds), busy)
    finally:
        await opened.close()


async def _stream_turn(
    agent: Agent,
    entry: MessageEntry,
    as_json: bool,
    limit: timedelta,
    checked: bool,
) -> int:
    run_id = new_id()
    stream = await agent.run(entry, run_id=run_id, if_unchanged=checked)
    printer = RunPrinter(console)
    stored: list[Entry] = []
    left: float | None = None  # seconds, while the clock is stopped for a person
    try:
        async with asyncio.timeout(limit.total_seconds()) as clock:
            async for event in stream.events():
                stored += event.entries or []
                if not as_json:
                    printer.handle(event)
                if (kind := event.agent.type if event.agent else "") in PEOPLE:
                    left = _stop_clock(clock, left, bool(agent.pending_approvals()))
                if kind == "approval_requested":
                    for call in (getattr(e, "tool_call_id", "") for e in event.entries or []):
                        said = f"  decide: durable-agent approve|deny {agent.session_id} {call}"
                        err.print(Text(said, style="dim"), soft_wrap=True)  # the run waits
    except TimeoutError:
        printer.finish()
        how = "it was cancelled" if await cancel_run(stream) else CANCEL_REQUESTED
        said = f"the run did not finish in {limit.total_seconds():g} s; {how}"
        err.print(f"[red]error:[/] {said}", soft_wrap=True)
        return 1
    except asyncio.CancelledError:  # Ctrl-C: where it left the session, as chat says
        ended, sid, leaf = await cancel_run(stream), agent.session_id, agent.leaf_id
        said = f"run cancelled; session {sid} is at leaf {leaf} (durable-agent show {sid})"
        err.print(said if ended else f"the run did not end: {CANCEL_REQUESTED}")
        raise
    finally:
        printer.finish()
    messages = await stream.wait()
    if waiting := agent.pending_approvals():  # it parked (the agent's approval_wait passed)
        said = f"  the run parked (its approval_wait passed); {_decide(agent.session_id, waiting)}"
        err.print(Text(said, style="dim"), soft_wrap=True)
    if as_json:
        replies, sid = [m.text() for m in messages if m.role == "assistant"], agent.session_id
        out = {"session_id": sid, "run_id": run_id, "workflow_id": run_workflow_id(sid, run_id)}
        out |= {"leaf_id": agent.leaf_id, "reply": replies[-1] if replies else ""}
        print_json(console, out | {"entries": [entry_json(e) for e in stored]})
    return 0


def _stop_clock(clock: asyncio.Timeout, left: float | None, stop: bool) -> float | None:
    """Stop ``--timeout``'s clock as the run starts waiting for a person's decision, start it
    again with the seconds it had left once its calls are decided; those seconds, if stopped."""
    now = asyncio.get_running_loop().time()
    if stop and left is None:
        left = (clock.when() or now) - now
        clock.reschedule(None)
    elif not stop and left is not None:
        clock.reschedule(now + left)
        left = None
    return left


def _decide(sid: str, calls: list[PendingItem]) -> str:
    """What waits for a person, and the command that decides it (a call at a time)."""
    names = ", ".join(f"{p.tool_name} ({p.tool_call_id})" for p in calls)
    call, verb = (calls[0].tool_call_id, "waits") if len(calls) == 1 else ("CALL_ID", "wait")
    return f"{names} {verb} for a decision: durable-agent approve|deny {sid} {call}"


async def cancel_run(stream: RunStream) -> bool:
    """Cancel the run, waiting at most :data:`CANCEL_WAIT`; whether it ended in that time."""
    try:
        await asyncio.wait_for(stream.cancel(), CANCEL_WAIT)
    except TimeoutError:
        return False
    except Exception:  # the run failed while cancelling: it ended
        pass
    return True


class RunPrinter:
    """Prints one run's events as they arrive, receipts included."""

    def __init__(self, console: Console, denied: Iterable[str] = ()) -> None:
        self.console = console
        self.indent = "  "
        self.denied = set(denied)
        """Calls a person denied (decided before the run, or by its ``approval_decided``
        events): they never run, so their ``tool_execution_start`` says nothing."""
        self._reveal = Reveal(self._text)
        self._open = False
        """A reply's line is open: its ``assistant ▸`` is written (with its first text)."""
        self.updates = 0
        """``message_update`` events printed (live tokens)."""

    def _write(self, text: str, style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), end="", soft_wrap=True, highlight=False)
        self.console.file.flush()

    def _text(self, piece: str) -> None:
        self._open_line()
        self._write(piece)

    def _open_line(self) -> None:
        """The reply's ``assistant ▸``, once it has something to show (a run that fails first
        leaves no empty line)."""
        if not self._open:
            self._write(f"{self.indent}assistant ▸ ", "bold green")
            self._open = True

    def _close_line(self) -> None:
        self._reveal.flush()
        if self._open:
            self.console.print()
            self._open = False

    def _receipt(self, event: Event, what: str) -> None:
        if ids := [e.id for e in event.entries or []]:
            self.console.print(
                f"{self.indent}[dim]✓ stored {what} {escape(', '.join(ids))}"
                f" · leaf {escape(event.leaf_id or '')}[/dim]"
            )

    def handle(self, event: Event) -> None:
        inner = event.agent
        if inner is None:
            return
        message = inner.message
        if inner.type != "message_update":
            self._reveal.flush()  # a reply's text is whole before whatever follows it
        if inner.type == "agent_start":
            self._receipt(event, "input")
        elif inner.type == "message_start" and message is not None and message.role == "assistant":
            self._reveal.reset()
            self._close_line()
        elif inner.type == "message_update" and message is not None:
            self.updates += 1
            text = message.text()
            if inner.restart:
                self._reveal.reset()
                self._close_line()
                self.console.print(
                    f"{self.indent}[yellow]↻ the model call was retried: the reply starts over[/]"
                )
            streamed = self._reveal.text
            if text.startswith(streamed) and len(text) > len(streamed):
                self._reveal.add(text)
        elif inner.type == "message_end" and message is not None:
            self._end_message(event, message)
        elif inner.type == "tool_execution_start" and inner.tool_call_id not in self.denied:
            self._close_line()
            said = escape(call_text(inner.tool_name or "", inner.args or {}))
            self.console.print(f"{self.indent}[bold magenta]⚙ tool[/] {said} [dim]running…[/dim]")
        elif inner.type == "tool_execution_update" and inner.partial_result:
            self.console.print(f"{self.indent}[dim]  … {escape(short(inner.partial_result))}[/]")
        elif inner.type in PEOPLE:
            self._close_line()
            for entry in event.entries or []:
                if inner.type == "approval_decided" and not getattr(entry, "approved", True):
                    self.denied.add(getattr(entry, "tool_call_id", ""))
                line = PEOPLE[inner.type](entry)
                self.console.print(f"{self.indent}[yellow]{escape(line)}[/] [dim]{entry.id}[/dim]")

    def _end_message(self, event: Event, message: Message) -> None:
        if message.role == "assistant":
            self._open_line()
            text, streamed = message.text(), self._reveal.text
            if not streamed and text:
                self._write(text)
            elif text.startswith(streamed) and len(text) > len(streamed):
                self._write(text[len(streamed) :])
            for call in message.tool_calls():
                self._write(
                    ("  " if text else "") + f"→ {call_text(call.name, call.arguments)}", "magenta"
                )
            if message.stop_reason in ("error", "aborted"):
                self._write(f"  [{message.stop_reason}: {message.error or ''}]", "red")
            elif message.stop_reason == "length":  # a call cut there is left out of it
                self._write("  [cut at the model's token limit]", "yellow")
            self._close_line()
            self._reveal.reset()
            self._receipt(event, "reply")
        elif message.role == "tool_result":
            self._close_line()
            style = "red" if message.is_error else "magenta"
            self.console.print(
                f"{self.indent}[{style}]↳ {escape(message.tool_name or 'tool')}:[/] "
                f"{escape(short(message.text(), 120))}"
            )
            self._receipt(event, "tool result")
        else:
            self._close_line()
            self._receipt(event, "input")

    def finish(self) -> None:
        self._close_line()
