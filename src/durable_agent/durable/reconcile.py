"""Run-start reconcile: the handle catches up with what the store holds for it
(docs/design.md#repair-and-reconcile).

A write can land after the run that made it failed: a store that timed out or lost the
connection after applying an append, or, on Temporal, a producer activity (``call_tool`` /
``call_model`` committing under its stamp) that finishes after its run was terminated. The handle
then lacks entries the store has, and run-start repair would answer a call a second
time: one call, two results, the real one off the path and the model told a tool that ran was
interrupted.

So before a run starts (both executors) the handle reconciles, at the cost of one load, and only
when there is something to reconcile (a write it is unsure of, or a dangling call at its leaf):

- entries of its own unsettled writes (``SessionState.unsettled``) that did land join its log and
  index; the leaf follows them when they chain from it;
- stored results chained from the leaf that answer the leaf's dangling calls are adopted too (the
  first in append order per call), whoever stored them, so repair answers only the calls that
  truly have no stored result.

Nothing else moves the leaf: another handle's sibling branch stays a sibling. The store's
append order puts every entry after its parent, so one pass over the log in that order follows
the leaf down, always taking the first child that qualifies.
"""

from __future__ import annotations

from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionError
from ..session.repair import dangling_calls
from .errors import PersistError
from .state import SessionState

__all__ = ["reconcile", "stored_answers"]


def _answers(entry: Entry, open_calls: set[str]) -> bool:
    return (
        isinstance(entry, MessageEntry)
        and entry.message.role == "tool_result"
        and entry.message.tool_call_id in open_calls
    )


def stored_answers(state: SessionState) -> list[Entry]:
    """The results the handle holds that a run from its leaf adopts for the leaf's dangling
    calls (see the module docstring), in append order, each chained from the one before."""
    open_calls = {c.id for c in dangling_calls(state.views()[0])}
    leaf, found = state.leaf or None, list[Entry]()
    for entry in state.log if open_calls else ():
        if entry.parent_id == leaf and _answers(entry, open_calls):
            assert isinstance(entry, MessageEntry)
            open_calls.discard(entry.message.tool_call_id or "")
            leaf = entry.id
            found.append(entry)
    return found


async def reconcile(state: SessionState) -> list[Entry]:
    """Adopt what the store holds for this handle (see the module docstring); returns the
    adopted entries in append order. Call it while the handle is busy (no write in flight).

    A store failure raises :class:`PersistError` and leaves the state unchanged (the unsettled
    writes stay unsettled, for the next attempt)."""
    unsettled = set(state.unsettled)
    if not unsettled and not dangling_calls(state.views()[0]):
        return []
    try:
        stored = await state.store.load_entries(state.session_id)
    except SessionError as exc:
        raise PersistError(f"persist input: reconcile with the store: {exc}") from exc
    state.unsettled.clear()
    adopted: list[Entry] = []
    open_calls = {c.id for c in dangling_calls(state.views()[0])}
    for entry in stored:
        if entry.parent_id != (state.leaf or None):
            continue
        if not (
            (entry.id in unsettled and entry.id not in state.index) or _answers(entry, open_calls)
        ):
            continue
        if entry.id not in state.index:
            adopted.append(entry)
        state.apply_receipt([entry], entry.id)
        open_calls = {c.id for c in dangling_calls(state.views()[0])}
    # the rest of what landed is stored for this handle too, off its path (a batch chained
    # from a leaf the handle has since left)
    rest = [e for e in stored if e.id in unsettled and e.id not in state.index]
    if rest:
        state.apply_receipt(rest, state.leaf)
        adopted.extend(rest)
    return adopted
