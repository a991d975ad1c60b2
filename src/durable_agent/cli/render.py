"""What the commands print: transcripts, trees, JSON, a streamed reply at the pace it came
(:class:`Reveal`), and a failure as one ``error:`` line with an exit code.

Exit codes: 0 success, 1 failure (the message says why), 2 usage error (a bad argument, store
spec, session ID or Temporal profile), 3 no such session, entry or run, 130 interrupted. Errors
say which Temporal server and store the command used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn, TypeVar, cast

import typer
from rich.console import Console
from rich.text import Text
from temporalio.service import RPCError
from typer.core import TyperCommand, TyperGroup

from ..ai import ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable import AgentError
from ..session import (
    ApprovalDecision,
    CompactionEntry,
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
from ..session.render import ACTIVE, LEAF, OFF_PATH, call_text, decision_text, short
from ..workflows.config import TemporalConfigError
from ..workflows.worker_logs import error_text
from . import AppLoadError
from .config import ENV_LOG_FORMAT, TARGET, CommandError, TemporalFlags, mongo_unreachable
from .processes import ProcessError

__all__ = [
    "FAILURE_LOG",
    "LONGEST",
    "LastResort",
    "PEOPLE",
    "PlainHelp",
    "SMOOTH_ABOVE",
    "Reveal",
    "UsageGroup",
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
    """``-v``: say which Temporal server and store are used (in the log: :data:`FAILURE_LOG`)."""
    if verbose:
        TARGET.echo = lambda line: (
            FAILURE_LOG.info("%s", line)
            if FAILURE_LOG is not None
            else err.print(Text(line, style="dim"), soft_wrap=True)
        )


def flags_from(
    address: str | None, namespace: str | None, profile: str | None, verbose: bool
) -> TemporalFlags:
    set_verbose(verbose)
    return TemporalFlags(address=address, namespace=namespace, profile=profile)


def print_error(out: Console, message: str, *, level: str = "error") -> None:
    """``error: message`` (or another ``level``) as plain text (never markup: error text can
    hold ``[/]`` or ``[redacted]``), without the keys this process holds."""
    message = redact(message, configured_secrets(os.environ))
    style = "red" if level == "error" else "yellow"
    out.print(Text.assemble((f"{level}: ", style), message), soft_wrap=True)


class LastResort(logging.Handler):
    """What the library logs while nothing configured logging (a command that is no worker):
    ``warning: <message>`` on stderr as errors show, its exception as a worker's log shows one,
    without the keys this process holds. :data:`logging.lastResort`, so logging replaces it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        shown = record.getMessage() + ("" if error is None else error_text(error))
        print_error(err, shown, level=record.levelname.lower())


FAILURE_LOG: logging.Logger | None = None
"""Set by a command whose output is a log (``worker``): its failure and -v lines are log lines."""


def fail(code: int, message: str) -> NoReturn:
    """Print the error, then what the command was talking to, and exit with ``code``."""
    if FAILURE_LOG is not None:
        text = redact(message, configured_secrets(os.environ))
        FAILURE_LOG.error("%s", "; ".join([text, *TARGET.lines(message)]))
    else:
        print_error(err, message)
        for line in TARGET.lines(message):
            err.print(Text(f"  ({line})", style="dim"), soft_wrap=True)
    raise typer.Exit(code)


USAGE_ERROR = cast(type[Exception], typer.BadParameter.__base__)
"""click's ``UsageError``, as the installed typer raises it (newer ones vendor click)."""


class PlainHelp(TyperCommand):
    """A command whose ``--help`` is click's plain text: rich's option tables cut option names
    and environment variables to fit 80 columns ("--max-concurrent-acti…")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rich_markup_mode = None


class UsageGroup(TyperGroup):
    """The ``durable-agent`` group. With JSON logs (``--log-format json`` or its variable), a
    usage error is one plain ``error:`` line (exit 2), not a panel a log collector mangles."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # read before parsing: a usage error comes before the command has its options
        log_format = os.environ.get(ENV_LOG_FORMAT)
        for i, arg in enumerate(args):
            if arg == "--log-format" and i + 1 < len(args):
                log_format = args[i + 1]
            elif arg.startswith("--log-format="):
                log_format = arg.partition("=")[2]
        ctx.meta["json_logs"] = log_format == "json"
        return _plain_usage(ctx, lambda: super(UsageGroup, self).parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        return _plain_usage(ctx, lambda: super(UsageGroup, self).invoke(ctx))


def _plain_usage(ctx: Any, step: Callable[[], T]) -> T:
    try:
        return step()
    except USAGE_ERROR as exc:
        if not ctx.meta.get("json_logs"):
            raise
        # an option missing its value names no context: the command being parsed then
        where, sub = getattr(exc, "ctx", None), ctx.invoked_subcommand or ""
        path = where.command_path if where else f"{ctx.command_path} {sub}".rstrip()
        problem = exc.format_message().rstrip(".")  # type: ignore[attr-defined]
        print_error(err, f"{problem}; see '{path} --help'")
        raise typer.Exit(2) from None


FAILURES = (AppLoadError, ProcessError, SessionError, AgentError, ModelError)
"""Failures of the library and the processes that end a command with exit code 1 (a corrupt
session among them: a FileStore's names its file; a refused connection or a timeout is an
``OSError``, also 1)."""


def guard(body: Callable[[], T]) -> T:
    """Known failures become a one-line message and an exit code; bugs keep their traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(130) from None
    except SessionNotFoundError as exc:
        fail(3, str(exc))
    except (InvalidSessionIdError, TemporalConfigError) as exc:
        fail(2, str(exc))
    except CommandError as exc:
        fail(exc.exit_code, str(exc))
    except FAILURES as exc:
        fail(1, str(exc))
    except RPCError as exc:
        fail(1, f"Temporal said: {exc}")
    except OSError as exc:  # the machine's answer (a data directory that cannot be made...)
        fail(1, str(exc))
    except Exception as exc:
        if (said := _mongo_failure(exc)) is not None:
            fail(1, said)
        raise


def _mongo_failure(exc: BaseException) -> str | None:
    """A PyMongo error as one line (without importing PyMongo when it is not installed): an
    unreachable server says where, any other error (credentials refused...) what MongoDB said."""
    errors = sys.modules.get("pymongo.errors")
    if errors is None or not isinstance(exc, errors.PyMongoError):
        return None
    if isinstance(exc, errors.ConnectionFailure):
        return str(mongo_unreachable(TARGET.store or "", exc))
    return "MongoDB said: " + " ".join(str(exc).split(", full error:")[0].split())


def run_command(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine under :func:`guard`."""
    return guard(lambda: asyncio.run(make()))


# -- entries, transcripts and trees ---------------------------------------------------------------


def print_json(console: Console, data: Any) -> None:
    """Plain JSON on the console's file: rich would wrap long strings into invalid JSON."""
    console.file.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")
    console.file.flush()


def _asked(entry: Entry) -> str:
    call = call_text(getattr(entry, "tool_name", ""), getattr(entry, "args", {}))
    return f"⏸ {call} waits for approval: call {getattr(entry, 'tool_call_id', '')}"


def _decided(entry: Entry) -> str:
    assert isinstance(entry, ApprovalDecision)  # what an ``approval_decided`` event holds
    return ("✓ " if entry.approved else "✗ ") + short(decision_text(entry))


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


def entry_label(entry: Entry) -> Text:
    """``<id> role: text`` for trees and listings (the library's one-line summary, styled)."""
    kind, said, suffix = entry_summary(entry, 70)
    if isinstance(entry, MessageEntry):
        style = _ROLE_STYLE.get(entry.message.role, "bold")
    else:
        style = _KIND_STYLE.get(kind, "bold blue")
    return Text.assemble((entry.id, "dim"), " ", (kind, style), said, (suffix, "dim"))


def entry_json(entry: Entry) -> dict[str, Any]:
    """The entry exactly as stores write it."""
    return cast(dict[str, Any], json.loads(encode_entry(entry)))


def render_tree(entries: Sequence[Entry], leaf_id: str, title: str, width: int = 0) -> Text:
    """The library's plain-text tree (:func:`durable_agent.session.render_tree`), styled (active
    path bold, branch headers yellow, the leaf marked), a line cut to ``width`` (not wrapped)."""
    out = Text(title, style="bold")
    for line in tree_lines(entries, leaf_id):
        out.append("\n" + line.guide)
        if line.entry is None:
            out.append(line.text()[len(line.guide) :], style="yellow")
            continue
        text = Text(ACTIVE if line.active else OFF_PATH)
        text.append(entry_label(line.entry))
        text.stylize("bold" if line.active else "dim")
        if width:
            text.truncate(width - len(line.guide) - len(LEAF) * line.leaf, overflow="ellipsis")
        if line.leaf:
            text.append(LEAF, style="bold yellow")
        out.append(text)
    return out


def render_transcript(console: Console, entries: Sequence[Entry]) -> None:
    """A transcript, one block per entry."""
    for entry in entries:
        if isinstance(entry, MessageEntry):
            m = entry.message
            role = ("tool" if m.role == "tool_result" else m.role, _ROLE_STYLE.get(m.role, "bold"))
            console.print(Text.assemble(role, (f"  {entry.id}", "dim")))
            console.print(Text(message_summary(m)), soft_wrap=True)
        elif isinstance(entry, CompactionEntry):
            console.print(Text(f"compaction  {entry.id}", style="bold yellow"))
            console.print(Text(entry.summary), soft_wrap=True)
        else:  # what it says whole: the call that waits for a person, the verdict
            kind, said, _ = entry_summary(entry, 10_000)
            heading = Text(f"{kind.rstrip(': ')}  {entry.id}", style="bold blue")
            console.print(heading + Text("\n" + said) if said else heading, soft_wrap=True)


# -- a streamed reply, at the pace it came -------------------------------------------------------

TICK = 0.04
"""Seconds between two writes of a batch being revealed."""
LONGEST = 1.0
"""Seconds a batch takes to write out at most."""
SMOOTH_ABOVE = 0.1
"""Batches closer together than this (seconds) are written at once."""
FINISH_EARLY = 0.9
"""A batch is written out within this fraction of the time the last one took: the next one
usually comes as it ends, not after a pause."""


class Reveal:
    """The text of one streaming reply, written to the terminal at the pace it came.

    On Temporal a reply's text reaches the client in batches, one per live write of the worker (a
    second apart by default, docs/design.md#live-deltas). Printed as they come, a reply jumps a
    line at a time; this writes each batch out through ``write`` over the time the one before it
    took to come (at most ``LONGEST``), so a reply reads as a stream, as on the chat page. Batches
    that come less than ``SMOOTH_ABOVE`` apart (an in-process run's tokens) are written at once,
    and so is whatever is left when anything else happens (the reply's receipt, a tool, the run's
    end): the text is always complete before the line that follows it.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._text = ""
        self._shown = 0
        self._last: float | None = None
        """Loop time the last batch came."""
        self._pace = (0.0, 0, 1.0)
        """The batch being revealed: when it started, what was shown then, seconds to take."""
        self._timer: asyncio.TimerHandle | None = None

    @property
    def text(self) -> str:
        """The reply so far, shown or not."""
        return self._text

    def add(self, text: str) -> None:
        """The reply so far, extending :attr:`text`: the previous batch is written out at
        once, this one over the time it took to come."""
        self.flush()
        self._text = text
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # printed from synchronous code: nothing to pace with
            loop = None
        now = None if loop is None else loop.time()
        took = None if now is None or self._last is None else now - self._last
        self._last = now
        if loop is None or now is None or took is None or took < SMOOTH_ABOVE:
            self.flush()
            return
        self._pace = (now, self._shown, min(took, LONGEST) * FINISH_EARLY)
        self._step(loop)

    def flush(self) -> None:
        """Write out everything received."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._show(len(self._text))

    def reset(self) -> None:
        """Write out what is left and start a new reply."""
        self.flush()
        self._text, self._shown, self._last = "", 0, None

    def _step(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        started, shown, duration = self._pace
        done = min(1.0, (loop.time() - started) / duration)
        self._show(max(shown + math.ceil((len(self._text) - shown) * done), self._shown + 1))
        if self._shown < len(self._text):
            self._timer = loop.call_later(TICK, self._step, loop)

    def _show(self, upto: int) -> None:
        upto = min(upto, len(self._text))
        if upto > self._shown:
            piece, self._shown = self._text[self._shown : upto], upto
            self._write(piece)
