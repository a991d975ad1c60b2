"""``durable-agent chat``: a REPL on one session, every turn a Temporal run.

Lines are read on a thread (:class:`Lines`): between runs each is a question or a ``/command``;
typed while a run works, a steer (``/later TEXT``: a follow-up; another ``/command`` waits, with
what follows it, for the run's end); piped, it waits for the run's end. A run waiting for a
decision takes its answers from the same lines (docs/design.md#approvals-and-steering; ``/quit``
leaves it waiting), a parked one's before the next message; they start the run that goes on. A
message the run no longer takes starts the next run: nothing typed is lost. Each turn runs on one
event loop (:class:`asyncio.Runner`); a Ctrl-C during a turn cancels its *task*, which asks the
workflow to cancel and waits until what it stored has arrived; the REPL carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ..ai import ModelError
from ..durable import Agent, AgentError, RunCancelledError, RunStream, When, new
from ..session import (
    Entry,
    SessionError,
    SessionNotFoundError,
    last_turn,
    path,
    transcript_view,
    validate_session_id,
)
from ..workflows import TemporalExecutor
from .approvals import Lines, ask, continuation, denied_calls, turn_settled
from .config import (
    AddressOpt,
    AgentOpt,
    NamespaceOpt,
    OpenedStore,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    TemporalFlags,
    VerboseOpt,
    open_store,
    queue_for,
    resolve_store_spec,
)
from .render import (
    console,
    entry_label,
    flags_from,
    guard,
    print_error,
    render_transcript,
    render_tree,
)
from .run import CANCEL_REQUESTED, RunPrinter, cancel_run, open_agent, refuse_busy
from .sessions import parent_of

__all__ = ["HELP", "Chat", "chat", "run_chat"]


def chat(
    session_id: Annotated[str, typer.Argument(help="Session to chat in (created if unknown).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Interactive chat: /edit TEXT, /retry, /branch ID, /switch [N|ID|SESSION], /fork [ID],
    /compact [N], /tree, /show, /help, /quit. Typing while the agent works steers it (/later TEXT:
    a follow-up). Ctrl-C during a reply cancels that run; the session stays."""
    flags = flags_from(address, namespace, profile, verbose)
    raise typer.Exit(guard(lambda: run_chat(console, session_id, store, task_queue, agent, flags)))


HELP = """commands:
  /tree              the branch tree (the active path in bold)
  /show              the transcript of the active path
  /branch ID|root    move the leaf to entry ID (root: before the first entry)
  /switch [N|ID]     list the branches, or go back to branch N (its last entry) or entry ID
  /switch parent|S   leave this session for a fork's parent, or for session S
  /edit TEXT         replace your last message with TEXT and answer again
  /retry             answer your last message again (a new branch)
  /fork [NEW_ID]     copy the active path into a new session and switch to it
  /compact [KEEP]    summarize the path, keeping the last KEEP turns verbatim (default 1)
  /help              this list
  /quit              leave (Ctrl-D works too); Ctrl-C during a reply cancels just that run
while the agent works:
  TEXT               a steer: stored after the current step's tool results, before its next reply
  /later TEXT        a follow-up: stored when the agent would stop, and answered then"""


class Chat:
    """One REPL's state: the current handle (a fork switches it) and its connections."""

    def __init__(
        self,
        console: Console,
        agent: Agent,
        opened: OpenedStore,
        executor: TemporalExecutor | None,  # None: in process (the tests)
        agent_name: str,
        lines: Lines,
    ):
        self.console = console
        self.agent = agent
        self.opened = opened
        self.executor = executor
        self.agent_name = agent_name
        self.lines = lines
        self.queue = executor.task_queue if executor else None
        self.carried: list[str] = []
        """Messages a run did not take (it ended meanwhile): the next run's input."""
        self.held: str | None = None
        """A /command typed while a run worked: it, and what follows it, waits for the run's end."""
        self._sends: set[asyncio.Task[None]] = set()

    def tips(self) -> list[Entry]:
        """The last entry of every branch (entries nothing follows), oldest first."""
        parents = {e.parent_id for e in self.agent.entries()}
        return [e for e in self.agent.entries() if e.id not in parents]

    async def switch(self, target: str) -> None:
        """``/switch``: list the branches, or move to one, or to another session."""
        agent, tips = self.agent, self.tips()
        if not target:
            for n, tip in enumerate(tips, 1):
                mark = "  ◀ active" if tip.id == agent.leaf_id else ""
                self.console.print(Text(f"  {n}. ").append(entry_label(tip)).append(mark))
            parent = await parent_of(self.opened.store, agent.session_id)
            if parent:
                self.console.print(f"  parent session: {escape(parent)} (/switch parent)")
            return
        if target.isdigit() and 1 <= int(target) <= len(tips):
            await agent.branch(tips[int(target) - 1].id)
        elif target in {e.id for e in agent.entries()}:
            await agent.branch(target)
        else:
            up = target == "parent"
            session = await parent_of(self.opened.store, agent.session_id) if up else target
            if not session:
                self.console.print(f"session {escape(agent.session_id)} has no parent")
                return
            await self._open_session(validate_session_id(session))
            return
        self.console.print(f"leaf is now {escape(self.agent.leaf_id or '(root)')}")

    async def _open_session(self, session_id: str) -> None:
        try:
            await self.opened.store.load_entries(session_id)
        except SessionNotFoundError:
            self.console.print(f"no session {escape(session_id)} (and no entry by that ID)")
            return
        self.agent = await new(
            self.agent_name, store=self.opened.store, session_id=session_id, executor=self.executor
        )
        self.console.print(
            f"now in session [bold]{escape(session_id)}[/] at leaf "
            f"{escape(self.agent.leaf_id or '(root)')} ({len(self.agent.entries())} entries)"
        )

    async def caught_up(self) -> Agent:
        """What a turn, /retry, /edit, /compact act on: the session as stored, no run going."""
        await self.agent.state.catch_up()
        if self.executor is not None:
            await refuse_busy(self.executor.client, self.agent)
        return self.agent

    async def turn(self, *texts: str) -> None:
        """One run, from what any process stored; a parked turn's waiting calls are asked first."""
        agent = await self.caught_up()
        if waiting := {p.request_id for p in agent.pending_approvals()}:
            asked = [e for e in agent.entries() if e.id in waiting]
            if await ask(self.console, agent, asked, self.lines.get, self._carry, self.queue):
                self.carried[:0] = texts  # the next step, after the run that goes on
                await self.follow(await continuation(self.console, agent))
            else:
                self.held = "/quit"  # the calls wait on, for `approve`
                self.console.print(f"[dim]not sent: {escape(' '.join(texts))}[/]")
            return
        await self.follow(await agent.run(*texts, if_unchanged=self.executor is not None))

    def _carry(self, text: str, when: When) -> None:
        self.carried.append(text)  # no run goes: the next one takes it

    async def follow(self, stream: RunStream) -> None:
        """Print a run's events while sending what is typed meanwhile into it; on cancellation
        (Ctrl-C) cancel the workflow, then re-raise."""
        printer = RunPrinter(self.console, denied_calls(self.agent))
        steering = asyncio.create_task(self.steer(stream))
        try:
            async for event in stream.events():
                printer.handle(event)
                if event.agent is not None and event.agent.type == "approval_requested":
                    printer.finish()
                    steering.cancel()  # the answers come from the same lines
                    await asyncio.gather(steering, return_exceptions=True)
                    asked, send = event.entries or [], functools.partial(self.send, stream)
                    if not await ask(
                        self.console, self.agent, asked, self.lines.get, send, self.queue
                    ):
                        self.held = "/quit"  # the run waits on for the calls asked
                        return
                    steering = asyncio.create_task(self.steer(stream))
        except asyncio.CancelledError:
            printer.finish()
            self.console.print("[yellow]cancelling the run…[/]")
            said = "run cancelled" if await cancel_run(stream) else CANCEL_REQUESTED
            self.console.print(f"[yellow]{said}[/]")
            raise
        except RunCancelledError:
            pass
        finally:
            printer.finish()
            steering.cancel()
            await asyncio.gather(steering, *self._sends, return_exceptions=True)
        with contextlib.suppress(RunCancelledError):
            await stream.wait()
        if turn_settled(self.agent):  # it parked, and the answers came after: go on
            await self.follow(await continuation(self.console, self.agent))

    async def steer(self, stream: RunStream) -> None:
        """While a run streams: a typed line is a steer, ``/later TEXT`` a follow-up."""
        lines = self.lines
        while lines.typed and self.held is None and (line := await lines.get()) is not None:
            word, _, rest = line.strip().partition(" ")
            if word in ("/later", "/steer") and rest.strip():
                self.send(stream, rest.strip(), "at_end" if word == "/later" else "next_turn")
            elif word in ("/later", "/steer"):
                self.console.print(f"usage: {word} TEXT (a message for the working agent)")
            elif word.startswith("/"):
                self.held = line.strip()
                self.console.print(f"[dim]{escape(word)}: once the agent is done[/]")
            elif word:
                self.send(stream, line.strip(), "next_turn")

    def send(self, stream: RunStream, text: str, when: When) -> asyncio.Task[None]:
        """Hand the run a message without waiting for its delivery (its ``input_delivered``
        event shows it stored); one the run does not take is carried to the next run."""

        async def sending() -> None:
            try:
                await stream.send(text, when=when)
            except Exception as exc:
                self.carried.append(text)
                self.console.print(
                    f"[yellow]the run did not take “{escape(text)}”[/] ({escape(str(exc))}): "
                    "it starts the next run"
                )

        what = "follow-up for when the agent is done" if when == "at_end" else "steer"
        self.console.print(f"[dim]✉ {what}: {escape(text)}[/]")
        task = asyncio.create_task(sending())
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)
        return task

    async def command(self, line: str) -> bool:
        """Run a ``/command``; False means quit."""
        # the rest verbatim: ``/edit What's up?`` is no shell line with an open quote
        name, _, rest = line[1:].strip().partition(" ")
        name, rest = (name.lower() or "help"), rest.strip()
        args, agent = rest.split(), self.agent
        if name in ("quit", "exit", "q"):
            return False
        if name in ("tree", "show", "branch", "switch", "fork"):  # what other shells stored too
            await agent.state.catch_up()
        if name == "help":
            self.console.print(HELP, highlight=False)
        elif name == "tree":
            self.console.print(
                render_tree(agent.entries(), agent.leaf_id, agent.session_id, self.console.width)
            )
        elif name == "show":
            render_transcript(self.console, transcript_view(path(agent.entries(), agent.leaf_id)))
        elif name == "branch":
            if len(args) != 1:
                self.console.print("usage: /branch ID|root  (IDs are shown by /tree)")
                return True
            await agent.branch("" if args[0] == "root" else args[0])
            self.console.print(f"leaf is now {escape(agent.leaf_id or '(root)')}")
        elif name in ("switch", "leaf"):
            await self.switch(rest)
        elif name in ("retry", "edit"):
            if name == "edit" and not rest:
                self.console.print("usage: /edit TEXT")
                return True
            agent = await self.caught_up()
            if (turn := last_turn(path(agent.entries(), agent.leaf_id))) is None:
                self.console.print(f"nothing to {name} yet")
                return True
            stream = await (agent.edit(rest) if name == "edit" else agent.retry())
            self.console.print(f"[dim]branched before {escape(turn.start.id)}[/dim]")
            await self.follow(stream)
        elif name == "fork":
            self.agent = child = await agent.fork(validate_session_id(rest) if rest else None)
            self.console.print(
                f"forked {escape(agent.session_id)} → [bold]{escape(child.session_id)}[/] "
                f"({len(child.entries())} entries); you are now in the fork"
            )
        elif name == "compact":
            if args and not args[0].isdigit():
                self.console.print("usage: /compact [KEEP]  (the number of turns kept verbatim)")
                return True
            entry = await (await self.caught_up()).compact(keep_turns=int(args[0]) if args else 1)
            said = entry and f"[yellow]compaction {escape(entry.id)}[/]: {escape(entry.summary)}"
            self.console.print(said or "nothing to compact")
        else:
            self.console.print(f"unknown command /{escape(name)}; /help lists them")
        return True


async def _open(
    console: Console,
    session_id: str,
    store: str | None,
    task_queue: str | None,
    agent_name: str,
    flags: TemporalFlags | None,
) -> Chat:
    lines = Lines(asyncio.get_running_loop())
    lines.typed = sys.stdin.isatty()
    validate_session_id(session_id)
    opened = open_store(resolve_store_spec(store))
    agent, executor = await open_agent(
        console,
        opened,
        session_id=session_id,
        task_queue=queue_for(task_queue, flags),
        agent_name=agent_name,
        flags=flags,
    )
    return Chat(console, agent, opened, executor, agent_name, lines)


def run_chat(
    console: Console,
    session_id: str,
    store: str | None,
    task_queue: str | None,
    agent_name: str,
    flags: TemporalFlags | None,
) -> int:
    """The REPL, as ``chat``'s options ask; returns the exit code."""
    with asyncio.Runner() as runner:
        chat = runner.run(_open(console, session_id, store, task_queue, agent_name, flags))
        entries = chat.agent.entries()
        console.print(
            f"[bold]session {escape(session_id)}[/] · {len(entries)} entries · agent "
            f"{escape(agent_name)} · queue {escape(chat.queue or '')} · /help for commands"
        )
        render_transcript(console, transcript_view(path(entries, chat.agent.leaf_id))[-4:])
        try:
            while (step := _next_step(runner, chat)) is not None:
                try:
                    if isinstance(step, str):
                        if not runner.run(chat.command(step)):
                            break
                    else:
                        runner.run(chat.turn(*step))
                except KeyboardInterrupt:
                    sid, leaf = chat.agent.session_id, chat.agent.leaf_id or "(root)"
                    console.print(f"session {escape(sid)} is at leaf {escape(leaf)}")
                except (AgentError, ModelError, SessionError, ValueError) as exc:
                    print_error(console, str(exc))
        finally:
            runner.run(chat.opened.close())
    return 0


def _next_step(runner: asyncio.Runner, chat: Chat) -> str | list[str] | None:
    """What the REPL does next: a ``/command`` (a ``str``), a run on texts (the messages the
    last run did not take first, then a ``/command`` typed during it), or ``None`` to leave."""
    while not chat.carried:
        if chat.held is not None:
            step, chat.held = chat.held, None
            return step
        try:
            line = runner.run(chat.lines.get(f"{chat.agent.session_id} ▸ "))
        except KeyboardInterrupt:
            chat.console.print()
            continue
        if line is None:
            chat.console.print()
            return None
        if line.strip().startswith("/"):
            return line.strip()
        if line.strip():
            return [line.strip()]
    texts, chat.carried = chat.carried, []
    return texts
