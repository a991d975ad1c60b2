"""What the commands print: run events as they happen, transcripts, trees, JSON, and a failure as
one ``error:`` line with an exit code.

A run's events are its receipts: a ``message_end`` arrives only after its entry is stored, so the
printer shows the stored entry ID and the new leaf right under each message. ``message_update``
deltas are printed as they arrive, in process and on Temporal alike (there the worker publishes
them on the store's live delta channel, outside workflow history, a batch at a time, which
:mod:`.reveal` writes out at the pace it came); an update with ``restart`` (the model call was
retried after a worker crash) starts the reply's line over.

Exit codes: 0 success, 1 failure (the message says why), 2 usage error (a bad argument, store
spec, session ID or Temporal profile), 3 no such session, entry or run, 130 interrupted. Errors
say which Temporal server and store the command used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from temporalio.service import RPCError

from ..ai import Message, ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable import AgentError, Event
from ..session import (
    CompactionEntry,
    CorruptSessionError,
    Entry,
    InvalidSessionIdError,
    MessageEntry,
    SessionError,
    SessionNotFoundError,
    encode_entry,
    entry_summary,
    message_summary,
    tree_lines,
)
from ..session.render import ACTIVE, LEAF, OFF_PATH, call_text, short
from ..workflows.config import TemporalConfigError
from . import AppLoadError
from .config import TARGET, CommandError, TemporalFlags, mongo_unreachable
from .processes import ProcessError
from .reveal import Reveal

__all__ = [
    "FAILURE_LOG",
    "RunPrinter",
    "console",
    "entry_json",
    "entry_label",
    "err",
    "fail",
    "flags_from",
    "guard",
    "print_error",
    "print_json",
    "render_transcript",
    "render_tree",
    "run_command",
    "set_verbose",
]

T = TypeVar("T")

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


# -- failures -------------------------------------------------------------------------------------


def set_verbose(verbose: bool) -> None:
    """``-v``: say which Temporal server and store are used as soon as each is resolved."""
    if verbose:
        TARGET.echo = lambda line: err.print(Text(line, style="dim"), soft_wrap=True)


def flags_from(
    address: str | None, namespace: str | None, profile: str | None, verbose: bool
) -> TemporalFlags:
    set_verbose(verbose)
    return TemporalFlags(address=address, namespace=namespace, profile=profile)


def print_error(out: Console, message: str) -> None:
    """``error: message`` as plain text (never markup: error text can hold ``[/]`` or
    ``[redacted]``), without the keys this process holds."""
    message = redact(message, configured_secrets(os.environ))
    out.print(Text.assemble(("error: ", "red"), message), soft_wrap=True)


FAILURE_LOG: logging.Logger | None = None
"""Set by a command whose output is a log (``worker``): its failure is one more log line."""


def fail(code: int, message: str) -> NoReturn:
    """Print the error, then what the command was talking to, and exit with ``code``."""
    if FAILURE_LOG is not None:
        text = redact(message, configured_secrets(os.environ))
        FAILURE_LOG.error("%s", "; ".join([text, *TARGET.lines()]))
        raise typer.Exit(code)
    print_error(err, message)
    for line in TARGET.lines():
        err.print(Text(f"  ({line})", style="dim"), soft_wrap=True)
    raise typer.Exit(code)


FAILURES = (
    AppLoadError,
    ProcessError,
    SessionError,
    ConnectionError,
    AgentError,
    ModelError,
    TimeoutError,
)
"""Failures of the library and the processes that end a command with exit code 1."""


def guard(body: Callable[[], T]) -> T:
    """Known failures become a one-line message and an exit code; bugs keep their traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None
    except SessionNotFoundError as exc:
        fail(3, str(exc))
    except CorruptSessionError as exc:
        fail(1, _damaged(exc))
    except (InvalidSessionIdError, TemporalConfigError) as exc:
        fail(2, str(exc))
    except CommandError as exc:
        fail(exc.exit_code, str(exc))
    except FAILURES as exc:
        fail(1, str(exc))
    except RPCError as exc:
        fail(1, f"Temporal said: {exc}")
    except Exception as exc:
        said = _mongo_failure(exc)
        if said is not None:
            fail(1, said)
        raise


def _damaged(exc: CorruptSessionError) -> str:
    """A damaged session names its file on a FileStore (the store line names only its root)."""
    spec = TARGET.store or ""
    if not spec.startswith("file:"):
        return str(exc)
    return f"{exc} in {Path(spec[len('file:') :]).expanduser().absolute() / exc.session_id}.jsonl"


def _mongo_failure(exc: BaseException) -> str | None:
    """A PyMongo error as one line (without importing PyMongo when it is not installed): an
    unreachable server says where, any other error (credentials refused...) what MongoDB said."""
    errors = sys.modules.get("pymongo.errors")
    if errors is None or not isinstance(exc, errors.PyMongoError):
        return None
    if isinstance(exc, errors.ConnectionFailure):
        return str(mongo_unreachable(TARGET.store or "", exc))
    return "MongoDB said: " + " ".join(str(exc).split(", full error:")[0].split())


def run_command(make: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine under :func:`guard`."""

    async def call() -> T:
        return await make()

    return guard(lambda: asyncio.run(call()))


# -- entries, transcripts and trees ---------------------------------------------------------------


def print_json(console: Console, data: Any) -> None:
    """Plain JSON on the console's file: rich would wrap long strings into invalid JSON."""
    console.file.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    console.file.flush()


def _asked(entry: Entry) -> str:
    call = call_text(getattr(entry, "tool_name", ""), getattr(entry, "args", {}))
    return f"⏸ {call} waits for approval"


def _decided(entry: Entry) -> str:
    word = "✓ approved" if getattr(entry, "approved", False) else "✗ denied"
    reason = getattr(entry, "reason", None)
    return f"{word} {getattr(entry, 'tool_call_id', '')}" + (f": {reason}" if reason else "")


def _delivered(entry: Entry) -> str:
    text = entry.message.text() if isinstance(entry, MessageEntry) else ""
    return f"✉ delivered into the run: {short(text)}"


PEOPLE: dict[str, Callable[[Entry], str]] = {
    "approval_requested": _asked,
    "approval_decided": _decided,
    "input_delivered": _delivered,
}
"""How a run's waits for people and the messages people sent show (one line per entry)."""


_ROLE_STYLE = {"user": "bold cyan", "assistant": "bold green", "tool_result": "bold magenta"}
_KIND_STYLE = {"compaction: ": "bold yellow"}


def entry_label(entry: Entry, *, limit: int = 70) -> Text:
    """``<id> role: text`` for trees and listings (the library's one-line summary, styled)."""
    kind, said, suffix = entry_summary(entry, limit)
    if isinstance(entry, MessageEntry):
        style = _ROLE_STYLE.get(entry.message.role, "bold")
    else:
        style = _KIND_STYLE.get(kind, "bold blue")
    return Text.assemble((entry.id, "dim"), " ", (kind, style), said, (suffix, "dim"))


def entry_json(entry: Entry) -> dict[str, Any]:
    """The entry exactly as stores write it."""
    data: dict[str, Any] = json.loads(encode_entry(entry))
    return data


def render_tree(entries: Sequence[Entry], leaf_id: str, title: str) -> Text:
    """The library's plain-text tree (:func:`durable_agent.session.render_tree`), styled: the
    active path bold, other entries dim, branch headers yellow, the leaf marked."""
    out = Text(title, style="bold")
    for line in tree_lines(entries, leaf_id):
        out.append("\n" + line.guide)
        if line.entry is None:
            out.append(line.text()[len(line.guide) :], style="yellow")
            continue
        text = Text(ACTIVE if line.active else OFF_PATH)
        text.append(entry_label(line.entry))
        text.stylize("bold" if line.active else "dim")
        if line.leaf:
            text.append(LEAF, style="bold yellow")
        out.append(text)
    return out


def render_transcript(console: Console, entries: Sequence[Entry]) -> None:
    """A transcript, one block per entry."""
    for entry in entries:
        if isinstance(entry, MessageEntry):
            m = entry.message
            role = "tool" if m.role == "tool_result" else m.role
            head = Text(f"{role}", style=_ROLE_STYLE.get(m.role, "bold"))
            head.append(f"  {entry.id}", style="dim")
            console.print(head)
            console.print(Text(message_summary(m)), soft_wrap=True)
        elif isinstance(entry, CompactionEntry):
            console.print(Text(f"compaction  {entry.id}", style="bold yellow"))
            console.print(Text(entry.summary), soft_wrap=True)
        else:
            console.print(Text(f"custom {entry.kind}  {entry.id}", style="bold blue"))


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
        self.restarts = 0
        """Model calls retried after a worker crash (the reply started over)."""

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
        ids = [e.id for e in event.entries or []]
        if ids:
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
                self.restarts += 1
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
            args = json.dumps(inner.args or {}, ensure_ascii=False)
            self.console.print(
                f"{self.indent}[bold magenta]⚙ tool[/] {escape(inner.tool_name or '')}"
                f"({escape(args)}) [dim]running…[/dim]"
            )
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
