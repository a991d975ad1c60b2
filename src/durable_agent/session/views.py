"""Views of a path: what the model sees, and what a person reads."""

from __future__ import annotations

from collections.abc import Sequence

from ..ai.messages import Message, TextContent
from .entries import CompactionEntry, Entry, MessageEntry
from .repair import repair_tool_calls

__all__ = ["model_view", "raw_model_view", "transcript_view"]


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


def transcript_view(path: Sequence[Entry]) -> list[Entry]:
    """``path`` without meta and ephemeral messages; compactions and custom entries kept."""
    return [e for e in path if not (isinstance(e, MessageEntry) and (e.meta or e.ephemeral))]
