"""``durable-agent sessions`` (one page of session records) and ``sessions rm`` (delete one).

The listing reads records only, through the store's ``list_sessions`` (newest first), so it costs
one page of records however long the sessions are; entry counts and last messages are ``show``'s
job. ``rm`` asks before deleting unless told ``--yes``; forks of the deleted session keep their
``parent_id``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..session.errors import SessionNotFoundError
from ..session.ids import validate_session_id
from .commands import NotFound
from .stores import open_store, retention
from .target import display_store

__all__ = ["NotConfirmed", "list_sessions_cmd", "remove_session_cmd"]


class NotConfirmed(Exception):
    """``sessions rm`` was answered no (or could not ask): nothing was deleted."""


def _print_json(console: Console, data: Any) -> None:
    console.file.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    console.file.flush()


async def list_sessions_cmd(
    console: Console, store_spec: str, as_json: bool, limit: int = 100, offset: int = 0
) -> int:
    """Print one page of sessions, newest first; says how to get the next page."""
    opened = open_store(store_spec)
    try:
        # one more than the page, to know whether there is a next page without counting
        records = await retention(opened).list_sessions(limit=limit + 1, offset=offset)
    finally:
        await opened.close()
    more, records = len(records) > limit, records[:limit]
    rows: list[dict[str, Any]] = [
        {"id": r.id, "parent_id": r.parent_id, "created_at": r.created_at.isoformat()}
        for r in records
    ]
    if as_json:
        _print_json(console, rows)
        return 0
    name = display_store(opened.spec)
    if not rows:
        console.print(f"no sessions in {escape(name)}" + (f" after {offset}" if offset else ""))
        return 0
    table = Table(title=f"sessions in {name} (newest first)", title_justify="left")
    widest = max(len(row["id"]) for row in rows)
    table.add_column("session", no_wrap=True, min_width=widest)
    table.add_column("parent", no_wrap=True, min_width=min(widest, 24))
    table.add_column("created", no_wrap=True, min_width=16)
    for row in rows:
        table.add_row(row["id"], row["parent_id"] or "", row["created_at"][:19].replace("T", " "))
    console.print(table)
    if more:
        console.print(
            f"[dim]{offset + 1}-{offset + len(rows)} shown; more with --offset "
            f"{offset + len(rows)}[/]"
        )
    return 0


async def remove_session_cmd(
    console: Console,
    session_id: str,
    store_spec: str,
    *,
    yes: bool,
    confirm: Callable[[str], bool],
) -> int:
    """Delete ``session_id`` (its entries and record) after ``confirm`` says yes (or ``--yes``)."""
    validate_session_id(session_id)
    opened = open_store(store_spec)
    try:
        store = retention(opened)
        name = display_store(opened.spec)
        try:
            await store.load_session(session_id)
        except SessionNotFoundError:
            raise NotFound(f"no session {session_id!r} in {name}") from None
        question = f"delete session {session_id} and all its entries from {name}?"
        if not yes and not confirm(question):
            raise NotConfirmed(f"session {session_id!r} was not deleted")
        await store.delete_session(session_id)
    finally:
        await opened.close()
    console.print(f"deleted session {escape(session_id)} from {escape(name)}")
    return 0
