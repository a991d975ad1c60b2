"""The transcript tree as plain text: what an application prints, and what the CLI styles.

A straight run of entries stays at one level and the tree only indents where the conversation
branches, so a long chat stays readable. Every branch point, several roots included (an edit or
retry of the first question), opens one ``⑂ branch i/n`` line per branch; entries on the active
path (root to the leaf) start with ``●``, the others with ``○``, and the leaf is marked
``◀ leaf``, so the text reads right without colour (docs/design.md#tree-and-views).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from ..ai.messages import Message
from .approvals import ApprovalDecision, ApprovalRequest
from .entries import CompactionEntry, CustomEntry, Entry, MessageEntry
from .tree import TreeNode, path, tree

__all__ = [
    "ACTIVE",
    "LEAF",
    "OFF_PATH",
    "TreeLine",
    "call_text",
    "decision_text",
    "entry_summary",
    "message_summary",
    "render_tree",
    "short",
    "tree_lines",
]

ACTIVE = "● "
"""Starts an entry on the active path."""
OFF_PATH = "○ "
"""Starts an entry off the active path."""
LEAF = "  ◀ leaf"
"""Ends the leaf's line."""


def short(text: str, limit: int = 90) -> str:
    """One line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def call_text(name: str, args: object) -> str:
    """A tool call as ``name({"arg": ...})``."""
    return f"{name}({json.dumps(args, ensure_ascii=False)})"


def decision_text(decision: ApprovalDecision) -> str:
    """A decision as ``approved call-1``, ``denied call-1: reason``; a call approved with edited
    arguments ``approved call-1 with edited arguments {...}``: those it ran with, not the ones
    its request shows."""
    said = f"{'approved' if decision.approved else 'denied'} {decision.tool_call_id}"
    if decision.approved and decision.args is not None:
        said += f" with edited arguments {json.dumps(decision.args, ensure_ascii=False)}"
    return said + (f": {decision.reason}" if decision.reason else "")


def message_summary(message: Message) -> str:
    """What a message says, in one line (tool calls shown as ``→ name(args)``)."""
    parts = [message.text()] if message.text() else []
    parts += [f"→ {call_text(c.name, c.arguments)}" for c in message.tool_calls()]
    return " ".join(parts) if parts else "(empty)"


def entry_summary(entry: Entry, limit: int = 70) -> tuple[str, str, str]:
    """An entry in one line, in three parts: its kind (``user: ``, ``tool: ``,
    ``compaction: ``, ``custom <kind>``), what it says (at most ``limit`` characters: for a
    request for approval the call, for a decision the verdict) and a suffix (`` [meta]``)."""
    if isinstance(entry, MessageEntry):
        role = entry.message.role
        name = "tool" if role == "tool_result" else role
        return (
            f"{name}: ",
            short(message_summary(entry.message), limit),
            (" [meta]" if entry.meta else ""),
        )
    if isinstance(entry, CompactionEntry):
        return "compaction: ", short(entry.summary, limit), ""
    assert isinstance(entry, CustomEntry)
    kind = f"custom {entry.kind or '?'}"
    if isinstance(entry, ApprovalRequest):
        return f"{kind}: ", short(call_text(entry.tool_name, entry.args), limit), ""
    if isinstance(entry, ApprovalDecision):
        return f"{kind}: ", short(decision_text(entry), limit), ""
    return kind, "", ""


class TreeLine(NamedTuple):
    """One line of the tree: an entry, or the header of one branch at a branch point."""

    guide: str
    """The tree drawing before the line's content (``├── ``, ``│   └── ``)."""
    entry: Entry | None
    """The entry, or ``None`` on a branch header."""
    branch: tuple[int, int] | None
    """A branch header's ``(i, n)``: branch ``i`` of the ``n`` at that point."""
    active: bool
    """On the active path (a branch header: its branch holds the active path)."""
    leaf: bool
    """The entry is the leaf."""

    def text(self, limit: int = 70) -> str:
        """The line as plain text, ``guide`` included."""
        if self.entry is None:
            assert self.branch is not None
            i, n = self.branch
            return f"{self.guide}⑂ branch {i}/{n}" + (" (active)" if self.active else "")
        kind, said, suffix = entry_summary(self.entry, limit)
        mark = ACTIVE if self.active else OFF_PATH
        return f"{self.guide}{mark}{self.entry.id} {kind}{said}{suffix}" + (
            LEAF if self.leaf else ""
        )


def tree_lines(entries: Sequence[Entry], leaf_id: str) -> list[TreeLine]:
    """The tree of ``entries`` as lines, top to bottom, the active path ending at
    ``leaf_id``. Ephemeral messages are left out: never stored, they are no branch of the
    tree (an in-process handle's log holds them, a reload or a Temporal handle does not)."""
    entries = [e for e in entries if not (isinstance(e, MessageEntry) and e.ephemeral)]
    active = {e.id for e in path(entries, leaf_id)}
    lines: list[TreeLine] = []

    def holds_active(node: TreeNode) -> bool:
        return node.entry.id in active

    def add_branches(prefix: str, nodes: Sequence[TreeNode]) -> None:
        if len(nodes) == 1:
            add_chain(prefix, nodes[0])
            return
        for i, child in enumerate(nodes, 1):
            last = i == len(nodes)
            lines.append(
                TreeLine(
                    prefix + ("└── " if last else "├── "),
                    None,
                    (i, len(nodes)),
                    holds_active(child),
                    False,
                )
            )
            add_chain(prefix + ("    " if last else "│   "), child)

    def add_chain(prefix: str, node: TreeNode) -> None:
        # a straight chain: every entry at one level, the last one drawn as the last child
        chain = [node]
        while len(chain[-1].children) == 1:
            chain.append(chain[-1].children[0])
        for i, current in enumerate(chain):
            last = i == len(chain) - 1
            entry = current.entry
            guide = prefix + ("└── " if last else "├── ")
            lines.append(TreeLine(guide, entry, None, entry.id in active, entry.id == leaf_id))
        if chain[-1].children:
            add_branches(prefix + "    ", chain[-1].children)

    add_branches("", tree(entries))
    return lines


def render_tree(
    entries: Sequence[Entry], leaf_id: str, title: str | None = None, *, limit: int = 70
) -> str:
    """The transcript tree of ``entries`` as plain text, one line per entry or branch header,
    under ``title`` when given; each entry's text is cut to ``limit`` characters."""
    out = [title] if title is not None else []
    out += [line.text(limit) for line in tree_lines(entries, leaf_id)]
    return "\n".join(out)
