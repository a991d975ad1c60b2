"""Turns: where a person's question starts, and what a run stored with it.

A **turn start** is a user message entry that is neither meta nor ephemeral: what a person
asked. Compaction counts turns by it, and ``edit``/``retry`` find the question to replace or ask
again by it (docs/design.md#tree-and-views).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .entries import CustomEntry, Entry, MessageEntry

__all__ = ["Turn", "is_turn_start", "last_turn"]


def is_turn_start(entry: Entry) -> bool:
    """Whether ``entry`` is a question a person asked (a user message, not meta, not
    ephemeral)."""
    return (
        isinstance(entry, MessageEntry)
        and entry.message.role == "user"
        and not entry.meta
        and not entry.ephemeral
    )


class Turn(NamedTuple):
    """The last turn of a path: its question and the input stored with it."""

    start: MessageEntry
    """The question; a new answer branches from its parent."""
    inputs: list[Entry]
    """The question and what follows it before the first reply: meta messages (a reminder
    stored with the question) and custom entries. Asking these again from the question's
    parent gives the model what it saw the first time (the parent's history plus them)."""


def last_turn(path: Sequence[Entry]) -> Turn | None:
    """The last turn on ``path`` (root to leaf), or ``None`` when no one asked anything."""
    for i in range(len(path) - 1, -1, -1):
        start = path[i]
        if is_turn_start(start):
            assert isinstance(start, MessageEntry)
            inputs: list[Entry] = [start]
            for entry in path[i + 1 :]:
                if isinstance(entry, CustomEntry) or (
                    isinstance(entry, MessageEntry) and entry.message.role == "user"
                ):
                    inputs.append(entry)
                else:
                    break
            return Turn(start, inputs)
    return None
