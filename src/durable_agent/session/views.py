"""Views of a path: what the model sees, and what a person reads.

What the model is sent has one formula, here, for both executors (docs/design.md#tree-and-views):
the model view of the history at the run's starting leaf, then the run's own messages in order
(:func:`run_view`). The in-process loop starts from :func:`model_view` of its path and appends the
run's messages as they are produced; the Temporal ``call_model`` activity, which holds no loop,
rebuilds the same list from the stored path with :func:`run_view`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ai.messages import Message, TextContent, ToolCall
from .entries import CompactionEntry, Entry, MessageEntry
from .repair import dangling_calls, repair_tool_calls
from .tree import path

__all__ = [
    "history_view",
    "model_view",
    "open_calls_at",
    "raw_model_view",
    "run_view",
    "transcript_view",
]


def raw_model_view(path: Sequence[Entry]) -> list[Message]:
    """:func:`model_view` before tool-call repair (used to detect what a run must repair)."""
    last = -1
    for i, e in enumerate(path):
        if isinstance(e, CompactionEntry):
            last = i
    if last < 0:
        return [e.message for e in path if isinstance(e, MessageEntry)]
    compaction = path[last]
    assert isinstance(compaction, CompactionEntry)
    out = [
        Message(
            role="user",
            content=[TextContent(text=compaction.summary)],
            timestamp=compaction.created_at,
        )
    ]
    start = last + 1
    if compaction.first_kept_id:
        for i in range(last):
            if path[i].id == compaction.first_kept_id:
                start = i
                break
    out.extend(e.message for e in path[start:] if isinstance(e, MessageEntry))
    return out


def model_view(path: Sequence[Entry]) -> list[Message]:
    """The messages the model sees for ``path``.

    With no compaction every message entry (meta and ephemeral included, custom skipped). After the
    last compaction: its summary as a user message, then the message entries from ``first_kept_id``
    (if it names an earlier path entry) or from just after the compaction. Always repaired.
    """
    return repair_tool_calls(raw_model_view(path))


def history_view(path: Sequence[Entry], cut: int) -> list[Message]:
    """:func:`model_view` of ``path[:cut]``, the history of a run that starts there, read
    through a compaction stored after the run's first reply: one made while that reply's calls
    waited for people (it keeps their turn), which the run that carries them out goes on from
    (docs/design.md#compaction). A compaction given as the run's input comes before any reply:
    stored, never sent."""
    later: list[Entry] = []
    replied = False
    for entry in path[cut:]:
        if isinstance(entry, MessageEntry) and entry.message.role == "assistant":
            replied = True
        elif replied and isinstance(entry, CompactionEntry):
            later.append(entry)
    return model_view([*path[:cut], *later])


def run_view(
    path: Sequence[Entry], start_leaf_id: str, ephemeral: Sequence[Entry] = ()
) -> list[Message]:
    """What the model sees mid-run, exactly as the in-process loop holds it.

    ``path`` runs from the root to the run's current leaf, through ``start_leaf_id`` (where the
    run started, ``""`` for a new root). The history is :func:`model_view` of the path up to the
    start leaf; the run's messages follow in order: its message inputs (meta ones included,
    custom and compaction inputs stored but never sent), the replies and results. ``ephemeral``
    are the run's ephemeral inputs, which the store never holds: each goes right after the entry
    its stamp names as parent (first for a root). The run's stored repair results are left out
    of its messages: the history already projects them.
    """
    entries = _with_ephemeral(path, ephemeral)
    cut = next((i for i, e in enumerate(entries) if e.id == start_leaf_id), -1)
    run = [e.message for e in entries[cut + 1 :] if isinstance(e, MessageEntry) and not e.synthetic]
    return [*history_view(entries, cut + 1), *run]


def _with_ephemeral(path: Sequence[Entry], ephemeral: Sequence[Entry]) -> Sequence[Entry]:
    """``path`` with each ephemeral entry placed after the entry its parent names."""
    if not ephemeral:
        return path
    by_parent: dict[str | None, list[Entry]] = {}
    for e in ephemeral:
        by_parent.setdefault(e.parent_id, []).append(e)
    out = by_parent.pop(None, [])
    for entry in path:
        out.append(entry)
        out.extend(by_parent.pop(entry.id, []))
    return out


def transcript_view(path: Sequence[Entry]) -> list[Entry]:
    """``path`` without meta and ephemeral messages; compactions and custom entries kept."""
    return [e for e in path if not (isinstance(e, MessageEntry) and (e.meta or e.ephemeral))]


def open_calls_at(entries: Sequence[Entry], leaf_id: str) -> list[ToolCall]:
    """The calls the path to ``leaf_id`` ends in and leaves unanswered: a run from there goes on
    with that turn, from their stored results if any (run-start reconcile adopts them, wherever
    they lead: docs/design.md#repair-and-reconcile), else from synthesized ones."""
    return dangling_calls(raw_model_view(path(entries, leaf_id)))
