"""The transcript tree: built from parent pointers alone, and walked from a leaf."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from .entries import Entry

__all__ = ["TreeNode", "path", "tree"]


class TreeNode(BaseModel):
    """One entry and its children, siblings in ``created_at`` order."""

    model_config = ConfigDict(frozen=True)

    entry: Entry
    children: list[TreeNode] = Field(default_factory=list)


def tree(entries: Sequence[Entry]) -> list[TreeNode]:
    """The forest of ``entries``.

    Roots are entries whose parent is ``None`` or absent from the input; siblings sort stably by
    ``created_at``. Entries caught in a parent cycle are unreachable from any root and so omitted;
    the call always ends.
    """
    by_id: dict[str, Entry] = {}
    for e in entries:
        by_id.setdefault(e.id, e)
    children: dict[str, list[Entry]] = {}
    roots: list[Entry] = []
    for e in by_id.values():
        if e.parent_id is None or e.parent_id not in by_id:
            roots.append(e)
        else:
            children.setdefault(e.parent_id, []).append(e)

    def key(e: Entry) -> datetime:
        return e.created_at

    # Iterative (no recursion limit on deep chains): order nodes depth-first from the roots,
    # then build TreeNodes bottom-up. Each ID is visited once, so the call always ends.
    seen: set[str] = set()
    order: list[Entry] = []
    kids_of: dict[str, list[Entry]] = {}
    ordered_roots = sorted(roots, key=key)
    stack = list(reversed(ordered_roots))
    while stack:
        e = stack.pop()
        if e.id in seen:
            continue
        seen.add(e.id)
        order.append(e)
        kids = [k for k in sorted(children.get(e.id, []), key=key) if k.id not in seen]
        kids_of[e.id] = kids
        stack.extend(reversed(kids))
    built: dict[str, TreeNode] = {}
    for e in reversed(order):
        built[e.id] = TreeNode(
            entry=e, children=[built[k.id] for k in kids_of[e.id] if k.id in built]
        )
    return [built[r.id] for r in ordered_roots if r.id in built]


def path(entries: Sequence[Entry] | Mapping[str, Entry], leaf_id: str) -> list[Entry]:
    """Root-to-leaf list of the entries on the leaf's ancestry.

    With a mapping (ID to entry) the cost scales with depth, not log size. An empty or unknown leaf
    gives ``[]``; the walk stops quietly at a missing parent or a repeated ID.
    """
    if not leaf_id:
        return []
    index: Mapping[str, Entry]
    if isinstance(entries, Mapping):
        index = entries
    else:
        built: dict[str, Entry] = {}
        for e in entries:
            built.setdefault(e.id, e)
        index = built
    out: list[Entry] = []
    seen: set[str] = set()
    current: str | None = leaf_id
    while current and current not in seen:
        entry = index.get(current)
        if entry is None:
            break
        seen.add(current)
        out.append(entry)
        current = entry.parent_id
    out.reverse()
    return out
