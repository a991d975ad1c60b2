"""``durable-agent chat``: a REPL on one session, every turn a Temporal run.

The prompt is read with ``input()`` (readline editing and history) in the main thread, and each
turn runs on one persistent event loop (:class:`asyncio.Runner`). A Ctrl-C during a turn cancels
that turn's *task*, which asks the workflow to cancel and waits until what it stored has arrived;
the session and the REPL carry on. Temporal runs do not record token deltas, so each message is
printed whole as its receipt arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from rich.console import Console
from rich.markup import escape
from rich.text import Text
from temporalio.client import Client

from ..ai.model import ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable.agent import Agent, new
from ..durable.errors import AgentError, RunCancelledError
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionError, SessionNotFoundError
from ..session.ids import validate_session_id
from ..session.tree import path
from ..session.views import transcript_view
from ..workflows import TemporalExecutor
from .commands import check_queue, connect_cli, drop_if_empty, session_exists
from .render import RunPrinter, entry_label, render_transcript, render_tree
from .stores import OpenedStore, open_store
from .target import TemporalFlags

__all__ = ["HELP", "Chat", "run_chat"]

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
  /quit              leave (Ctrl-D works too); Ctrl-C during a reply cancels just that run"""


class Chat:
    """One REPL's state: the current handle (a fork switches it) and its connections."""

    def __init__(
        self,
        console: Console,
        agent: Agent,
        client: Client,
        opened: OpenedStore,
        executor: TemporalExecutor | None = None,
        agent_name: str = "demo",
        created: bool = False,
    ):
        self.console = console
        self.agent = agent
        self.client = client
        self.opened = opened
        self.executor = executor or TemporalExecutor(client, task_queue="durable-agent")
        self.agent_name = agent_name
        self.created = created
        """Whether opening the chat created its session (removed again if left empty)."""

    def tips(self) -> list[Entry]:
        """The last entry of every branch (entries nothing follows), oldest first."""
        entries = self.agent.entries()
        parents = {e.parent_id for e in entries}
        return [e for e in entries if e.id not in parents]

    async def switch(self, target: str) -> None:
        """``/switch``: list the branches, or move to one, or to another session."""
        agent = self.agent
        tips = self.tips()
        if not target:
            active = agent.leaf_id
            for n, tip in enumerate(tips, 1):
                mark = "  ◀ active" if tip.id == active else ""
                self.console.print(Text(f"  {n}. ").append(entry_label(tip)).append(mark))
            parent = await self._parent_of(agent.session_id)
            if parent:
                self.console.print(f"  parent session: {escape(parent)} (/switch parent)")
            return
        if target.isdigit() and 1 <= int(target) <= len(tips):
            await agent.branch(tips[int(target) - 1].id)
        elif target in {e.id for e in agent.entries()}:
            await agent.branch(target)
        else:
            session = await self._parent_of(agent.session_id) if target == "parent" else target
            if not session:
                self.console.print(f"session {escape(agent.session_id)} has no parent")
                return
            await self._open_session(validate_session_id(session))
            return
        self.console.print(f"leaf is now {escape(self.agent.leaf_id or '(root)')}")

    async def _parent_of(self, session_id: str) -> str | None:
        load_session = getattr(self.opened.store, "load_session", None)
        if load_session is None:
            return None
        record = await load_session(session_id)
        return record.parent_id if record is not None else None

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

    def _last_user(self) -> MessageEntry | None:
        for entry in reversed(path(self.agent.entries(), self.agent.leaf_id)):
            if isinstance(entry, MessageEntry) and entry.message.role == "user":
                return entry
        return None

    async def turn(self, text: str) -> None:
        """One run; on cancellation (Ctrl-C) cancel the workflow, then re-raise."""
        stream = await self.agent.run(text)
        printer = RunPrinter(self.console)
        try:
            async for event in stream.events():
                printer.handle(event)
        except asyncio.CancelledError:
            printer.finish()
            self.console.print("[yellow]cancelling the run…[/]")
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stream.cancel(), 30)
            raise
        except RunCancelledError:
            pass
        finally:
            printer.finish()
        with contextlib.suppress(RunCancelledError):
            await stream.wait()

    async def command(self, line: str) -> bool:
        """Run a ``/command``; False means quit."""
        # Split off the command word only: the rest is taken verbatim (``/edit What's up?``
        # must not be parsed as a shell line with an open quote).
        name, _, rest = line[1:].strip().partition(" ")
        name, rest = (name.lower() or "help"), rest.strip()
        args = rest.split()
        agent = self.agent
        if name in ("quit", "exit", "q"):
            return False
        if name == "help":
            self.console.print(HELP, highlight=False)
        elif name == "tree":
            self.console.print(render_tree(agent.entries(), agent.leaf_id, agent.session_id))
        elif name == "show":
            render_transcript(self.console, transcript_view(path(agent.entries(), agent.leaf_id)))
        elif name == "branch":
            if len(args) != 1:
                self.console.print("usage: /branch ID|root  (IDs are shown by /tree)")
                return True
            target = "" if args[0] == "root" else args[0]
            await agent.branch(target)
            self.console.print(f"leaf is now {escape(agent.leaf_id or '(root)')}")
        elif name in ("switch", "leaf"):
            await self.switch(rest)
        elif name in ("retry", "edit"):
            last = self._last_user()
            if last is None:
                self.console.print("nothing to retry yet")
                return True
            text = rest if name == "edit" else last.message.text()
            if not text:
                self.console.print("usage: /edit TEXT")
                return True
            await agent.branch(last.parent_id or "")
            self.console.print(f"[dim]branched before {escape(last.id)}[/dim]")
            await self.turn(text)
        elif name == "fork":
            child = await agent.fork(validate_session_id(args[0]) if args else None)
            self.agent = child
            self.console.print(
                f"forked {escape(agent.session_id)} → [bold]{escape(child.session_id)}[/] "
                f"({len(child.entries())} entries); you are now in the fork"
            )
        elif name == "compact":
            keep = int(args[0]) if args else 1
            entry = await agent.compact(keep_turns=keep)
            if entry is None:
                self.console.print("nothing to compact")
            else:
                self.console.print(
                    f"[yellow]compaction {escape(entry.id)}[/]: {escape(entry.summary)}"
                )
        else:
            self.console.print(f"unknown command /{escape(name)}; /help lists them")
        return True


async def _open(
    console: Console,
    session_id: str,
    store_spec: str,
    task_queue: str,
    agent_name: str,
    flags: TemporalFlags | None,
) -> Chat:
    validate_session_id(session_id)
    opened = open_store(store_spec)
    client = await connect_cli(flags)
    await check_queue(console, client, task_queue, opened)
    existed = await session_exists(opened, session_id)
    executor = TemporalExecutor(client, task_queue=task_queue)
    agent = await new(agent_name, store=opened.store, session_id=session_id, executor=executor)
    return Chat(console, agent, client, opened, executor, agent_name, created=not existed)


def run_chat(
    console: Console,
    *,
    session_id: str,
    store_spec: str,
    task_queue: str,
    agent_name: str,
    flags: TemporalFlags | None = None,
) -> int:
    """The REPL; returns the exit code."""
    with asyncio.Runner() as runner:
        chat = runner.run(_open(console, session_id, store_spec, task_queue, agent_name, flags))
        entries = chat.agent.entries()
        console.print(
            f"[bold]session {escape(session_id)}[/] · {len(entries)} entries · agent "
            f"{escape(agent_name)} · queue {escape(task_queue)} · /help for commands"
        )
        recent = transcript_view(path(entries, chat.agent.leaf_id))[-4:]
        if recent:
            render_transcript(console, recent)
        try:
            while True:
                try:
                    line = input(f"{chat.agent.session_id} ▸ ").strip()
                except EOFError:
                    console.print()
                    break
                except KeyboardInterrupt:
                    console.print()
                    continue
                if not line:
                    continue
                try:
                    if line.startswith("/"):
                        if not runner.run(chat.command(line)):
                            break
                    else:
                        runner.run(chat.turn(line))
                except KeyboardInterrupt:
                    console.print(
                        f"[yellow]run cancelled[/]; session {escape(chat.agent.session_id)} is "
                        f"at leaf {escape(chat.agent.leaf_id)}"
                    )
                except (AgentError, ModelError, SessionError, ValueError) as exc:
                    shown = redact(str(exc), configured_secrets(os.environ))
                    console.print(Text.assemble(("error: ", "red"), shown), soft_wrap=True)
        finally:
            if chat.created:  # nothing was said: leave no empty session behind
                runner.run(drop_if_empty(chat.opened, session_id))
            runner.run(chat.opened.close())
    return 0
