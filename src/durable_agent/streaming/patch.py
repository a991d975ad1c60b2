"""Patches between two partial messages, so a reader rebuilds each published partial exactly.

A patch holds the message fields other than ``content`` when they changed (``head``), the
resulting block count (``size``) and per-block operations: ``+`` appends to a text or thinking
block's growing field, ``=`` replaces the block. Any provider's partials round-trip unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..ai.messages import Message

__all__ = ["Delta", "apply_patch", "diff_patch"]

_GROWING = {"text": "text", "thinking": "thinking"}


class Delta(BaseModel):
    """One published patch of one model-call attempt; ``seq`` counts from 1 per attempt."""

    attempt: int
    seq: int
    head: dict[str, Any] | None = None
    size: int = 0
    ops: list[tuple[int, str, Any]] = Field(default_factory=list)


def _split(message: Message | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    if message is None:
        return None, []
    data = message.model_dump(mode="json")
    blocks = data.pop("content", [])
    return data, blocks


def diff_patch(
    prev: Message | None, cur: Message
) -> tuple[dict[str, Any] | None, int, list[tuple[int, str, Any]]] | None:
    """The patch turning ``prev`` into ``cur``; ``None`` when they are equal."""
    prev_head, prev_blocks = _split(prev)
    head, blocks = _split(cur)
    ops: list[tuple[int, str, Any]] = []
    for i, block in enumerate(blocks):
        old = prev_blocks[i] if i < len(prev_blocks) else None
        if old == block:
            continue
        field = _GROWING.get(str(block.get("type")))
        if (
            old is not None
            and field is not None
            and old.get("type") == block.get("type")
            and {k: v for k, v in old.items() if k != field}
            == {k: v for k, v in block.items() if k != field}
            and str(block.get(field, "")).startswith(str(old.get(field, "")))
        ):
            ops.append((i, "+", str(block.get(field, ""))[len(str(old.get(field, ""))) :]))
        else:
            ops.append((i, "=", block))
    changed_head = head if head != prev_head else None
    if not ops and changed_head is None and len(blocks) == len(prev_blocks):
        return None
    return changed_head, len(blocks), ops


def apply_patch(
    head: dict[str, Any], blocks: list[dict[str, Any]], delta: Delta
) -> tuple[dict[str, Any], list[dict[str, Any]], Message]:
    """Apply ``delta`` to a reader's state; returns the new state and the partial message."""
    if delta.head is not None:
        head = dict(delta.head)
    out = [dict(b) for b in blocks[: delta.size]]
    for i, op, value in delta.ops:
        while len(out) <= i:
            out.append({})
        if op == "=":
            out[i] = dict(value)
        else:
            field = _GROWING[str(out[i].get("type"))]
            out[i][field] = str(out[i].get(field, "")) + str(value)
    return head, out, Message.model_validate({**head, "content": out})
