"""``durable-agent approvals|approve|deny``: decide a session's pending tool calls from any shell.

``approvals SESSION`` lists the calls of the session's active path that wait for a decision
(read from the store: no Temporal needed). ``approve``/``deny SESSION CALL_ID`` decide one: the
run that waits for it gets the decision through its ``decide`` update; a run that parked has the
decision stored at the session's leaf instead, and once every call of that turn is decided the
command starts the asking agent's continuation run and says so
(docs/design.md#approvals-and-steering); ``chat`` takes its answers from :class:`Lines`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from ..activities.run_contracts import RunState
from ..durable import Agent, RunStream, When, new
from ..session import ApprovalRequest, Entry, edited_args, path, validate_session_id
from ..session.approvals import ApprovalDecision, awaiting_turn, pending_in
from ..session.render import call_text, decision_text, short
from ..workflows import TemporalExecutor, run_workflow_id
from ..workflows.run_start import started_agent
from .config import (
    AddressOpt,
    JsonOpt,
    NamespaceOpt,
    NotFound,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    TemporalFlags,
    UsageError,
    VerboseOpt,
    open_store,
    queue_for,
    resolve_store_spec,
)
from .render import (
    console,
    err,
    flags_from,
    guard,
    print_error,
    print_json,
    run_command,
    set_verbose,
)
from .run import RunPrinter, open_agent

__all__ = [
    "Lines",
    "approvals",
    "approve",
    "ask",
    "continuation",
    "denied_calls",
    "deny",
    "show_approvals",
    "turn_settled",
]


@contextlib.contextmanager
def noticed(queue: str | None) -> Iterator[None]:
    """A decision made inside that no worker takes within five seconds is said so, once, on
    stderr, and waited for on: with its worker gone Temporal holds it for the next one."""
    said = (
        "no worker has taken the decision yet; it will be delivered when a worker polls the "
        f"queue {queue!r}; Ctrl-C stops waiting, the decision may still be delivered"
    )
    timer = queue and asyncio.get_running_loop().call_later(
        5.0, lambda: print_error(err, said, level="note")
    )
    try:
        yield
    finally:
        if timer:
            timer.cancel()


def approvals(
    session_id: Annotated[str, typer.Argument(help="Session whose pending calls to list.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """List the tool calls of a session that wait for a person's decision."""
    set_verbose(verbose)
    spec = resolve_store_spec(store)
    raise typer.Exit(run_command(lambda: list_pending(console, session_id, spec, as_json)))


async def list_pending(console: Console, session_id: str, spec: str, as_json: bool) -> int:
    opened = open_store(spec)
    try:
        items = await pending_in(opened.store, validate_session_id(session_id))
    finally:
        await opened.close()
    if as_json:
        print_json(console, [i.model_dump(mode="json") for i in items])
        return 0
    for item in items:  # the call, then the run that asked
        said = f"{item.tool_call_id}  {call_text(item.tool_name, item.args)}"
        console.print(escape(said) + f"  [dim](run {escape(item.run_id)})[/]")
    call = items[0].tool_call_id if len(items) == 1 else "CALL_ID"  # what to type next
    how = f"decide: durable-agent approve|deny {session_id} {call}" if items else ""
    console.print(escape(how or f"no pending tool calls in session {session_id}"))
    return 0


class Lines:
    """Lines read by ``input()`` on a thread into a queue of the chat's loop, taken while a run
    streams as well as between runs; ``None``: the end of input (Ctrl-D), kept. A line not UTF-8
    (a terminal in another encoding) is refused, as ``run`` refuses it, not stored mangled."""

    typed = True  # at a terminal; else piped, all there at once: each waits for the last run

    def __init__(self, loop: asyncio.AbstractEventLoop, read: Callable[[], str] = input) -> None:
        self.queue: asyncio.Queue[str | ValueError | None] = asyncio.Queue()
        self.ended = False
        self._loop = loop
        self._input = read  # blocks its thread until a line is typed; EOFError at the end
        threading.Thread(target=self._read, name="chat-input", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                line: str | ValueError | None = self._input()
            except EOFError:
                line = None
            except UnicodeDecodeError as exc:  # a strict stdin: the next line still comes
                line = exc
            self._loop.call_soon_threadsafe(self.queue.put_nowait, line)
            if line is None:
                return

    async def get(self, prompt: str = "") -> str | None:
        """The next line, after showing ``prompt``."""
        while not self.ended:
            if prompt:
                print(prompt, end="", flush=True)
            line = await self.queue.get()
            try:  # a lenient stdin hands the bytes as lone surrogates
                if isinstance(line, str):
                    line.encode("utf-8")
            except UnicodeEncodeError as exc:
                line = exc
            if isinstance(line, ValueError):
                print_error(err, "the line is not valid UTF-8: not sent (type it again)")
                continue
            self.ended = line is None
            return line
        return None


Read = Callable[[str], Awaitable[str | None]]  # the next line after a prompt (None: the end)
Send = Callable[[str, When], object]  # hand the waiting run a message (a steer, a follow-up)


async def ask(
    console: Console, agent: Agent, requests: list[Entry], read: Read, send: Send, queue: str | None
) -> bool:
    """``chat``'s questions while a run waits (docs/design.md#approvals-and-steering): each
    call shown, ``y``, ``n [reason]`` or ``e`` (edit its arguments as JSON) taken, ``/steer`` or
    ``/later TEXT`` sent. ``/quit`` or the end of input leaves them pending (``approve`` decides
    them): ``False``, the chat is left."""
    for request in [r for r in requests if isinstance(r, ApprovalRequest)]:
        call = call_text(request.tool_name, request.args)
        console.print(f"[bold yellow]approve[/] {escape(call)}? {escape('[y / n reason / e]')}")
        while (answer := await read("  ▸ ")) is not None and answer.strip() != "/quit":
            word, _, rest = answer.strip().partition(" ")
            if word in ("/steer", "/later") and rest.strip():
                send(rest.strip(), "next_turn" if word == "/steer" else "at_end")
                continue
            args: dict[str, Any] | None = None
            if word.lower() == "e":  # the fields typed change, the others are kept
                try:
                    changes = _object(await read("  arguments to change (JSON) ▸ ") or "", "it")
                except UsageError as exc:
                    console.print(escape(str(exc)))
                    continue
                args, word = edited_args(request.args, changes), "y"
            if word.lower() in ("y", "n"):
                reason = rest.strip() or None
                with noticed(queue):  # the run's task queue (``None``: in process)
                    yes, call_id = word.lower() == "y", request.tool_call_id
                    await agent.decide(call_id, yes, reason=reason, args=args, decided_by="chat")
                break
            console.print("answer y, n \\[reason], e, /steer TEXT, /later TEXT or /quit")
        else:  # left: this call and the rest wait for ``approve``
            ids = escape(f"{agent.session_id} {request.tool_call_id}")
            console.print(f"[dim]left pending: durable-agent approve|deny {ids}[/]")
            return False
    return True


ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (shown to the model).")]
ByOpt = Annotated[str | None, typer.Option("--by", help="Who decides (stored as decided_by).")]
ArgsOpt = Annotated[str | None, typer.Option(help="Arguments to change, as JSON (others kept).")]
AgentOpt = Annotated[str | None, typer.Option(help="Agent to go on (default: the asker).")]


def _decide_command(approved: bool) -> Any:
    def command(
        session_id: Annotated[str, typer.Argument(help="Session of the pending call.")],
        call_id: Annotated[str, typer.Argument(help="The tool call ID (see `approvals`).")],
        reason: ReasonOpt = None,
        decided_by: ByOpt = None,
        args: ArgsOpt = None,
        store: StoreOpt = None,
        task_queue: QueueOpt = None,
        agent: AgentOpt = None,
        address: AddressOpt = None,
        namespace: NamespaceOpt = None,
        profile: ProfileOpt = None,
        verbose: VerboseOpt = False,
    ) -> None:
        flags = flags_from(address, namespace, profile, verbose)
        edited = guard(lambda: _edited(args, approved, call_id))  # one line, exit 2
        raise typer.Exit(
            run_command(
                lambda: decide(
                    console,
                    session_id=session_id,
                    call_id=call_id,
                    approved=approved,
                    reason=reason,
                    args=edited,
                    decided_by=decided_by,
                    store_spec=resolve_store_spec(store),
                    task_queue=queue_for(task_queue, flags),
                    agent_name=agent,
                    flags=flags,
                )
            )
        )

    if not approved:  # deny refuses --args (a denied call does not run): not offered either
        hidden = typer.Option("--args", hidden=True)
        command.__annotations__["args"] = Annotated[str | None, hidden]
    verb = "Approve" if approved else "Deny"
    command.__doc__ = f"{verb} a pending tool call (the waiting run gets it, or the next run)."
    command.__name__ = "approve" if approved else "deny"
    return command


def _edited(args: str | None, approved: bool, call_id: str) -> dict[str, Any] | None:
    """The edited arguments; a usage error (before Temporal is asked) for bad ones or no ID."""
    if not call_id.strip():
        raise UsageError("the tool call ID is empty (see `durable-agent approvals SESSION`)")
    if args is not None and not approved:  # a denied call does not run: dropped, it misleads
        raise UsageError("--args edits an approved call's arguments: use it with approve")
    return None if args is None else _object(args, "--args")


def _object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{what} must be a JSON object")
    return value


approve = _decide_command(True)
deny = _decide_command(False)


async def decide(
    console: Console,
    *,
    session_id: str,
    call_id: str,
    approved: bool,
    reason: str | None,
    args: dict[str, Any] | None,
    decided_by: str | None,
    store_spec: str,
    task_queue: str,
    agent_name: str | None,
    flags: TemporalFlags | None,
) -> int:
    opened = open_store(store_spec)
    try:  # the store answers a mistyped call or session: Temporal is asked after it
        sid = validate_session_id(session_id)
        pending = {p.tool_call_id: p for p in await pending_in(opened.store, sid)}
        if call_id not in pending:
            raise NotFound(f"no pending tool call {call_id!r} in session {session_id!r}")
        agent, executor = await open_agent(
            console,
            opened,
            session_id=session_id,
            task_queue=task_queue,
            agent_name=agent_name or "demo",
            flags=flags,
        )
        with noticed(task_queue):
            ran = None if args is None else edited_args(pending[call_id].args, args)
            entry = await agent.decide(
                call_id, approved, reason=reason, args=ran, decided_by=decided_by
            )
        assert isinstance(entry, ApprovalDecision)  # what ``decide`` stores
        console.print(f"{escape(short(decision_text(entry)))} (decision {escape(entry.id)})")
        await _continue(console, agent, executor, pending[call_id].run_id, agent_name)
        return 0
    finally:
        await opened.close()


async def _continue(
    console: Console, agent: Agent, executor: TemporalExecutor, run_id: str, named: str | None
) -> None:
    """A decision stored at the leaf (the run that asked is not running) that settles the
    turn: start the continuation run, of the agent that asked unless one is ``named``."""
    if not turn_settled(agent):
        return  # other calls of the turn still wait
    handle = executor.client.get_workflow_handle(asked := run_workflow_id(agent.session_id, run_id))
    with contextlib.suppress(RPCError):
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            return  # the waiting run took the decision and goes on by itself
    if named is None and (asking := await started_agent(executor.client, asked)):
        agent = await new(asking, store=agent.store, session_id=agent.session_id, executor=executor)
    stream = await continuation(console, agent)
    printer = RunPrinter(console, denied_calls(agent))
    try:
        async for event in stream.events():
            printer.handle(event)
    finally:
        printer.finish()


def denied_calls(agent: Agent) -> set[str]:
    """The calls of the handle's awaiting turn that a person denied (they will not run)."""
    turn = awaiting_turn(path(agent.entries(), agent.leaf_id))
    return set() if turn is None else {i for i, d in turn.decisions.items() if not d.approved}


def turn_settled(agent: Agent) -> bool:
    """The handle's tail is a turn whose calls asked people and are all decided, none answered
    yet: a run parked on it and the decisions came after (a run on it runs the calls)."""
    turn = awaiting_turn(path(agent.entries(), agent.leaf_id))
    return turn is not None and not agent.pending_approvals()


async def continuation(console: Console, agent: Agent) -> RunStream:
    """Start the run that goes on from a settled turn (:func:`turn_settled`), under the turn's
    own ID as a server starts it (two processes settling it start one run), and say so."""
    turn = awaiting_turn(path(agent.entries(), agent.leaf_id))
    stream = await agent.run(run_id=None if turn is None else turn.continuation_id())
    console.print(f"every call of the turn is decided: continuing in run {escape(stream.run_id)}")
    return stream


async def show_approvals(console: Console, client: Client, agent: Agent) -> None:
    """The demo's step on people: a call that waits for a person (approved, with a message
    sent into the run while it waits, which lands between two tool calls), then one that is
    denied."""
    asks = [
        ("Email the Q3 figures to the team.", None, "Also check the weather in Lisbon."),
        ("Email the Q3 figures to the board.", "not before the audit", None),
    ]
    for text, refusal, steer in asks:
        console.print(f"  [bold cyan]you ▸[/] {text}")
        stream = await agent.run(text)
        printer = RunPrinter(console)
        sent: asyncio.Future[Entry] | None = None
        async for event in stream.events():
            printer.handle(event)
            if event.agent is None or event.agent.type != "approval_requested":
                continue
            printer.finish()
            if steer is not None:
                console.print(f"  [bold cyan]you, while it waits ▸[/] {steer}")
                sent = asyncio.ensure_future(stream.send(steer))
                await _queued(client, agent.session_id, stream.run_id)
            for call in (getattr(r, "tool_call_id", "") for r in event.entries or []):
                await agent.decide(call, refusal is None, reason=refusal, decided_by="demo")
        printer.finish()
        if sent is not None:
            await sent


async def _queued(client: Client, session_id: str, run_id: str) -> None:
    """Until the run holds the message just sent (so it lands in this turn): its ``state()``."""
    handle = client.get_workflow_handle(run_workflow_id(session_id, run_id))
    for _ in range(200):
        if (await handle.query("state", result_type=RunState)).queued_inputs:
            return
        await asyncio.sleep(0.05)
