"""The session commands: ``sessions`` (one page of records), ``sessions rm``, ``show`` (a
transcript or the whole tree) and ``state`` (the live state of the session's latest run).

The listing reads records only: one page of records however long the sessions are. ``rm`` asks
first unless told ``--yes``, deletes a damaged session and finishes a half-done delete; forks keep
their ``parent_id``; ``--workflows`` also deletes its workflows, whose histories hold its text
(docs/design.md#retention). ``state`` queries the run workflow on Temporal (a worker must poll
its task queue); a closed run reports how it closed (why, and the run before it if it failed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import ApplicationError

from ..session import Entry, SessionNotFoundError, Store, path, transcript_view, validate_session_id
from ..session.errors import CorruptSessionError
from ..workflows import SEARCH_ATTRIBUTE, RunState, delete_session_workflows
from .config import (
    AddressOpt,
    CommandError,
    JsonOpt,
    NamespaceOpt,
    NotFound,
    ProfileOpt,
    StoreOpt,
    TemporalFlags,
    VerboseOpt,
    connect,
    display_store,
    open_store,
    resolve_store_spec,
    retention,
)
from .render import (
    console,
    entry_json,
    err,
    flags_from,
    print_json,
    render_transcript,
    render_tree,
    run_command,
    set_verbose,
)

__all__ = [
    "NotConfirmed",
    "latest_runs",
    "list_sessions",
    "parent_of",
    "query_state",
    "remove_session",
    "run_state",
    "sessions_cli",
    "show",
    "show_session",
    "state",
]


# -- the commands ---------------------------------------------------------------------------------

sessions_cli = typer.Typer(
    help="List the store's sessions, newest first (one page of records), or delete one.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@sessions_cli.callback()
def sessions(
    ctx: typer.Context,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Sessions per page.")] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")] = 0,
    prefix: Annotated[str, typer.Option("--prefix", help="Only IDs starting with this.")] = "",
    verbose: VerboseOpt = False,
) -> None:
    """List one page of the store's sessions, newest first (records only: fast on any size)."""
    set_verbose(verbose)
    ctx.obj = store
    if ctx.invoked_subcommand is not None:
        return
    spec = resolve_store_spec(store)
    page = (limit, offset, prefix)
    raise typer.Exit(run_command(lambda: list_sessions(console, spec, as_json, *page)))


@sessions_cli.command("rm")
def sessions_rm(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument(help="Session to delete.")],
    store: StoreOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask first.")] = False,
    workflows: Annotated[
        bool, typer.Option(help="Also delete its workflows (their histories) from Temporal.")
    ] = False,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Delete a session: its entries and its record (forks keep their parent_id), and with
    --workflows its workflow histories on Temporal. Asks first."""
    set_verbose(verbose)
    spec = resolve_store_spec(store or ctx.obj)
    flags = flags_from(address, namespace, profile, verbose) if workflows else None

    def remove() -> Coroutine[Any, Any, int]:
        return remove_session(console, session_id, spec, yes=yes, confirm=_confirm, temporal=flags)

    raise typer.Exit(run_command(remove))


def _confirm(question: str) -> bool:
    """Ask on the terminal; no terminal (a pipe, a script) counts as no: pass --yes there."""
    if not sys.stdin.isatty():
        err.print(
            f"{question} (not a terminal: pass --yes to delete)", soft_wrap=True, markup=False
        )
        return False
    return typer.confirm(question, default=False)


def show(
    session_id: Annotated[str, typer.Argument(help="Session to show.")],
    store: StoreOpt = None,
    as_tree: Annotated[bool, typer.Option("--tree", help="Draw the whole branch tree.")] = False,
    as_json: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Print a session's transcript (the active path), or its whole tree with --tree."""
    set_verbose(verbose)
    spec = resolve_store_spec(store)
    raise typer.Exit(run_command(lambda: show_session(console, session_id, spec, as_tree, as_json)))


def state(
    session_id: Annotated[str, typer.Argument(help="Session whose latest run to query.")],
    as_json: JsonOpt = False,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Query the live state() of the session's latest run on Temporal."""
    flags = flags_from(address, namespace, profile, verbose)
    raise typer.Exit(run_command(lambda: query_state(console, session_id, as_json, flags)))


# -- the store's sessions -------------------------------------------------------------------------


class NotConfirmed(CommandError):
    """``sessions rm`` was answered no (or could not ask): nothing was deleted."""


async def list_sessions(
    console: Console, spec: str, as_json: bool, limit: int = 100, offset: int = 0, prefix: str = ""
) -> int:
    """One page of sessions with IDs starting with ``prefix``, newest first; says how to go on."""
    opened = open_store(spec)
    try:  # one more than the page, to know whether there is a next page without counting
        store = retention(opened)
        records = await store.list_sessions(limit=limit + 1, offset=offset, prefix=prefix)
    finally:
        await opened.close()
    more, records = len(records) > limit, records[:limit]
    rows: list[dict[str, Any]] = [
        {"id": r.id, "parent_id": r.parent_id, "created_at": r.created_at.isoformat()}
        for r in records
    ]
    if as_json:
        print_json(console, rows)
        return 0
    name = display_store(opened.spec)
    if not rows:
        where = (f" starting with {prefix}" if prefix else "") + f" in {name}"
        console.print(escape(f"no sessions{where}" + (f" after {offset}" if offset else "")))
        return 0
    title = f"sessions in {name} (newest first)"  # markup-free, one line over the table
    table = Table(title=escape(title), title_justify="left", min_width=len(title))
    widest = max(len(row["id"]) for row in rows)
    table.add_column("session", no_wrap=True, min_width=widest)
    table.add_column("parent", no_wrap=True, min_width=min(widest, 24))
    table.add_column("created (UTC)", no_wrap=True, min_width=19)  # records keep UTC
    for row in rows:
        table.add_row(row["id"], row["parent_id"] or "", row["created_at"][:19].replace("T", " "))
    console.print(table)
    if more:
        end = offset + len(rows)
        console.print(f"[dim]{offset + 1}-{end} shown; more with --offset {end}[/]")
    return 0


async def remove_session(
    console: Console,
    session_id: str,
    store_spec: str,
    *,
    yes: bool,
    confirm: Callable[[str], bool],
    temporal: TemporalFlags | None = None,
) -> int:
    """Delete ``session_id`` (its entries and record) after ``confirm`` says yes (or ``--yes``);
    with ``temporal``, its workflows on that server too (connected first: a server that is down
    leaves the session as it was)."""
    validate_session_id(session_id)
    client = None if temporal is None else await connect(temporal)
    opened = open_store(store_spec)
    try:
        store = retention(opened)
        name = display_store(opened.spec)
        try:
            await store.load_session(session_id)
        except SessionNotFoundError:
            try:  # what a delete that died half-way left (entries without a record) goes too
                await store.delete_session(session_id)
            except SessionNotFoundError:
                raise NotFound(f"no session {session_id!r} in {name}") from None
        except CorruptSessionError:
            pass  # deleting is how a damaged file goes: the store deletes it without decoding
        also = "" if client is None else " and its workflows from Temporal"
        question = f"delete session {session_id} and all its entries from {name}{also}?"
        if not yes and not confirm(question):
            raise NotConfirmed(f"session {session_id!r} was not deleted")
        await store.delete_session(session_id)
    finally:
        await opened.close()
    console.print(f"deleted session {escape(session_id)} from {escape(name)}")
    if client is not None:
        deleted = await delete_session_workflows(client, session_id)
        console.print(
            f"deleted {deleted} workflow execution(s) of {escape(session_id)} from Temporal"
            " (Temporal removes them in the background)"
        )
    return 0


async def parent_of(store: Store, session_id: str) -> str | None:
    """The session a fork was made from; None for a root session or a store without records."""
    load_session = getattr(store, "load_session", None)
    record = None if load_session is None else await load_session(session_id)
    return record.parent_id if record is not None else None


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
        parent = await parent_of(opened.store, session_id)
        if as_json:
            shown_json = [entry_json(e) for e in shown]
            head = {"session_id": session_id, "parent_id": parent, "leaf_id": leaf}
            print_json(console, {**head, "entries": shown_json})
        elif as_tree:
            console.print(render_tree(entries, leaf, f"session {session_id}", console.width))
        else:
            fork = f", forked from {parent}" if parent else ""
            console.print(
                f"[bold]session {session_id}[/] · {len(entries)} entries · leaf {leaf}{fork}"
            )
            render_transcript(console, shown)
        return 0
    finally:
        await opened.close()


# -- the latest run's state -----------------------------------------------------------------------

_CLOSED = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued_as_new",
}
"""A closed run's status by how its workflow closed: it wins over what the ``state()`` query
replays (a run terminated mid-tool replays as ``running_tools``, one that failed before its first
step as ``starting``)."""


async def latest_runs(client: Client, session_id: str, n: int = 2) -> list[WorkflowExecution]:
    """The ``n`` most recently started run workflows of ``session_id`` (found by search
    attribute), newest first."""
    sid = validate_session_id(session_id)
    query = f'{SEARCH_ATTRIBUTE}="{sid}" AND WorkflowType="durable_agent.run"'
    runs = [execution async for execution in client.list_workflows(query)]
    return sorted(runs, key=lambda e: e.start_time, reverse=True)[:n]


async def _why_closed(handle: WorkflowHandle[Any, Any]) -> str | None:
    """Why a run that did not complete closed: its failure, or the termination's reason."""
    try:
        await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=15))
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type:
            return f"{cause.type}: {cause.message}"
        return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    except Exception:  # the status says enough
        return None
    return None


async def run_state(client: Client, execution: WorkflowExecution) -> dict[str, Any]:
    """The run's ``state()`` with its workflow's facts; a closed workflow's status wins."""
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    described = await handle.describe()
    closed = _CLOSED.get(described.status) if described.status is not None else None
    try:
        state: RunState = await handle.query(
            "state", result_type=RunState, rpc_timeout=timedelta(seconds=15)
        )
    except WorkflowQueryFailedError:  # answered, with a refusal: a run whose input was refused
        if closed is None:
            raise
        state = RunState.refused(execution.id.rsplit("/")[-1])
    except Exception as exc:
        raise ConnectionError(
            f"the state query of {execution.id} was not answered ({exc}); queries need a worker "
            "polling the run's task queue"
        ) from exc
    data = state.model_dump(mode="json")
    data.update(
        status=closed or state.status,
        workflow_id=execution.id,
        workflow_run_id=execution.run_id,
        workflow_status=described.status.name if described.status is not None else "UNKNOWN",
        task_queue=execution.task_queue,
    )
    if closed not in (None, "completed", "continued_as_new"):
        data["failure"] = await _why_closed(handle)
    return data


async def query_state(
    console: Console, session_id: str, as_json: bool, flags: TemporalFlags | None = None
) -> int:
    session_id = validate_session_id(session_id)  # before Temporal: it goes into a list query
    runs = await latest_runs(client := await connect(flags), session_id)
    if not runs:
        raise NotFound(f"no runs of session {session_id!r} on this Temporal server")
    data = await run_state(client, runs[0])
    if "failure" in data and len(runs) > 1:  # the run before it is the session's last real one
        status = runs[1].status.name if runs[1].status is not None else "UNKNOWN"
        data["previous_run"] = {"workflow_id": runs[1].id, "workflow_status": status}
    if as_json:
        print_json(console, data)
        return 0
    table = Table(title=f"latest run of {session_id}", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    pending = ", ".join(f"{c['name']} ({c['id']})" for c in data["pending_tool_calls"])
    rows = [
        ("workflow", data["workflow_id"]),
        ("workflow status", data["workflow_status"]),
        ("run status", data["status"]),
        ("failure", data.get("failure")),
        ("turns", str(data["turn_count"])),
        ("leaf", data["leaf_id"]),
        ("pending tools", pending or "-"),
        ("new entries", ", ".join(data["new_entry_ids"]) or "-"),
        ("tokens", f"{data['usage'].get('input', 0)} in / {data['usage'].get('output', 0)} out"),
    ]
    if "previous_run" in data:
        previous = data["previous_run"]
        rows.append(("previous run", f"{previous['workflow_id']} ({previous['workflow_status']})"))
    for key, value in rows:
        if value is not None:
            table.add_row(key, escape(value))
    console.print(table)
    return 0
