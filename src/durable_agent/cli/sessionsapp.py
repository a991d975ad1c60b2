"""The session commands: ``run``, ``sessions`` (and ``sessions rm``), ``show``, ``state``, ``chat``.

Every command that talks to Temporal takes ``--address``, ``--namespace`` and ``--profile``; the
store commands take ``--store``; ``-v`` says which Temporal and store are used.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Annotated

import typer

from .base import (
    cli,
    console,
    err,
    flags_from,
    guard,
    queue_for,
    run_command,
    set_verbose,
)
from .options import (
    AddressOpt,
    AgentOpt,
    JsonOpt,
    NamespaceOpt,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    VerboseOpt,
)
from .stores import resolve_store_spec

__all__ = ["chat", "run", "sessions", "sessions_rm", "show", "state"]


# -- session commands ---------------------------------------------------------------------------


@cli.command()
def run(
    session_id: Annotated[str, typer.Argument(help="Session to run on (created if unknown).")],
    text: Annotated[str, typer.Argument(help="The user message ('-' reads it from stdin).")],
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    agent: AgentOpt = "demo",
    as_json: JsonOpt = False,
    timeout: Annotated[
        float, typer.Option(help="Give up (and cancel the run) after this.")
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
    from .commands import run_turn

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


sessions_cli = typer.Typer(
    help="List the store's sessions, newest first (one page of records), or delete one.",
    invoke_without_command=True,
    no_args_is_help=False,
)
cli.add_typer(sessions_cli, name="sessions")


@sessions_cli.callback()
def sessions(
    ctx: typer.Context,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Sessions per page.")] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")] = 0,
    verbose: VerboseOpt = False,
) -> None:
    """List one page of the store's sessions, newest first (records only: fast on any size)."""
    set_verbose(verbose)
    ctx.obj = store
    if ctx.invoked_subcommand is not None:
        return
    from .sessionscmd import list_sessions_cmd

    spec = resolve_store_spec(store)
    raise typer.Exit(run_command(lambda: list_sessions_cmd(console, spec, as_json, limit, offset)))


@sessions_cli.command("rm")
def sessions_rm(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session to delete.")],
    store: StoreOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask first.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Delete a session: its entries and its record (forks keep their parent_id). Asks first."""
    from .sessionscmd import remove_session_cmd

    set_verbose(verbose)
    spec = resolve_store_spec(store or ctx.obj)
    raise typer.Exit(
        run_command(
            lambda: remove_session_cmd(console, session_id, spec, yes=yes, confirm=_confirm)
        )
    )


def _confirm(question: str) -> bool:
    """Ask on the terminal; no terminal (a pipe, a script) counts as no: pass --yes there."""
    if not sys.stdin.isatty():
        err.print(
            f"{question} (not a terminal: pass --yes to delete)", soft_wrap=True, markup=False
        )
        return False
    return typer.confirm(question, default=False)


@cli.command()
def show(
    session_id: Annotated[str, typer.Argument(help="Session to show.")],
    store: StoreOpt = None,
    as_tree: Annotated[bool, typer.Option("--tree", help="Draw the whole branch tree.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print a session's transcript (the active path), or its whole tree with --tree."""
    from .commands import show_session

    set_verbose(verbose)
    raise typer.Exit(
        run_command(
            lambda: show_session(console, session_id, resolve_store_spec(store), as_tree, as_json)
        )
    )


@cli.command()
def state(
    session_id: Annotated[str, typer.Argument(help="Session whose latest run to query.")],
    as_json: JsonOpt = False,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Query the live state() of the session's latest run on Temporal."""
    from .commands import query_state

    flags = flags_from(address, namespace, profile, verbose)
    raise typer.Exit(run_command(lambda: query_state(console, session_id, as_json, flags)))


@cli.command()
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
    /compact [N], /tree, /show, /help, /quit. Ctrl-C during a reply cancels that run; the
    session stays."""
    from .chat import run_chat

    flags = flags_from(address, namespace, profile, verbose)
    raise typer.Exit(
        guard(
            lambda: run_chat(
                console,
                session_id=session_id,
                store_spec=resolve_store_spec(store),
                task_queue=queue_for(task_queue, flags),
                agent_name=agent,
                flags=flags,
            )
        )
    )
