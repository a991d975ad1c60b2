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
import shlex

from rich.console import Console
from temporalio.client import Client

from ..ai.model import ModelError
from ..durable.agent import Agent, new
from ..durable.errors import AgentError, RunCancelledError
from ..session.entries import MessageEntry
from ..session.errors import SessionError
from ..session.ids import validate_session_id
from ..session.tree import path
from ..session.views import transcript_view
from ..workflows import TemporalExecutor
from .commands import connect_cli, has_pollers
from .render import RunPrinter, render_transcript, render_tree
from .stores import OpenedStore, open_store

__all__ = ["HELP", "Chat", "run_chat"]

HELP = """commands:
  /tree              the branch tree (the active path in bold)
  /show              the transcript of the active path
  /branch ID|root    move the leaf to entry ID (root: before the first entry)
  /edit TEXT         replace your last message with TEXT and answer again
  /retry             answer your last message again (a new branch)
  /fork [NEW_ID]     copy the active path into a new session and switch to it
  /compact [KEEP]    summarize the path, keeping the last KEEP turns verbatim (default 1)
  /help              this list
  /quit              leave (Ctrl-D works too); Ctrl-C during a reply cancels just that run"""


class Chat:
    """One REPL's state: the current handle (a fork switches it) and its connections."""

    def __init__(self, console: Console, agent: Agent, client: Client, opened: OpenedStore):
        self.console = console
        self.agent = agent
        self.client = client
        self.opened = opened

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
        words = shlex.split(line[1:]) or ["help"]
        name, args = words[0].lower(), words[1:]
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
            self.console.print(f"leaf is now {agent.leaf_id or '(root)'}")
        elif name in ("retry", "edit"):
            last = self._last_user()
            if last is None:
                self.console.print("nothing to retry yet")
                return True
            text = " ".join(args) if name == "edit" else last.message.text()
            if not text:
                self.console.print("usage: /edit TEXT")
                return True
            await agent.branch(last.parent_id or "")
            self.console.print(f"[dim]branched before {last.id}[/dim]")
            await self.turn(text)
        elif name == "fork":
            child = await agent.fork(validate_session_id(args[0]) if args else None)
            self.agent = child
            self.console.print(
                f"forked {agent.session_id} → [bold]{child.session_id}[/] "
                f"({len(child.entries())} entries); you are now in the fork"
            )
        elif name == "compact":
            keep = int(args[0]) if args else 1
            entry = await agent.compact(keep_turns=keep)
            if entry is None:
                self.console.print("nothing to compact")
            else:
                self.console.print(f"[yellow]compaction {entry.id}[/]: {entry.summary}")
        else:
            self.console.print(f"unknown command /{name}; /help lists them")
        return True


async def _open(
    console: Console, session_id: str, store_spec: str, task_queue: str, agent_name: str
) -> Chat:
    validate_session_id(session_id)
    opened = open_store(store_spec)
    client = await connect_cli()
    if not await has_pollers(client, task_queue):
        console.print(
            f"[yellow]warning:[/] no worker polls task queue {task_queue!r}; replies wait for one"
        )
    executor = TemporalExecutor(client, task_queue=task_queue)
    agent = await new(agent_name, store=opened.store, session_id=session_id, executor=executor)
    return Chat(console, agent, client, opened)


def run_chat(
    console: Console, *, session_id: str, store_spec: str, task_queue: str, agent_name: str
) -> int:
    """The REPL; returns the exit code."""
    with asyncio.Runner() as runner:
        chat = runner.run(_open(console, session_id, store_spec, task_queue, agent_name))
        entries = chat.agent.entries()
        console.print(
            f"[bold]session {session_id}[/] · {len(entries)} entries · agent {agent_name} · "
            f"queue {task_queue} · /help for commands"
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
                        f"[yellow]run cancelled[/]; session {chat.agent.session_id} is at leaf "
                        f"{chat.agent.leaf_id}"
                    )
                except (AgentError, ModelError, SessionError, ValueError) as exc:
                    console.print(f"[red]error:[/] {exc}")
        finally:
            runner.run(chat.opened.close())
    return 0
