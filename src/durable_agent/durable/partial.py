"""A streaming reply's partial message as a reader rebuilds it from its live deltas.

:class:`PartialReply` applies a reply's patches one by one: a client following a reply rebuilds its
message a few times a second, after an idle wait each time (when every line of code it runs is
slow: cold caches), so it validates only what a delta replaced and copies the rest
(docs/design.md#live-deltas). :func:`extends` says whether a stored reply only grows what its live
updates showed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from ..ai.messages import ContentBlock, Message, TextContent
from ..session.deltas import GROWING, Delta

__all__ = ["PartialReply", "copied", "extends"]

M = TypeVar("M", bound=BaseModel)

_BLOCK: TypeAdapter[ContentBlock] = TypeAdapter(ContentBlock)
_EMPTY = TextContent(text="")
_set = object.__setattr__


def copied(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)`` (shallow, unvalidated), in fewer steps: a streaming
    reply's reader copies a few models per update, each a cold path after its idle wait."""
    new = model.__class__.__new__(model.__class__)
    fields = model.__dict__.copy()
    fields.update(update)
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(new, "__pydantic_extra__", model.__pydantic_extra__)
    _set(new, "__pydantic_private__", model.__pydantic_private__)
    return new


class PartialReply:
    """One attempt's partial reply, rebuilt delta by delta, validating only the blocks a delta
    replaced and the head when it changes (a block that only grew is the validated one with its
    text longer)."""

    def __init__(self) -> None:
        self.base = Message(role="assistant")
        self.raw: list[dict[str, Any]] = []
        self.blocks: list[ContentBlock] = []

    def apply(self, delta: Delta) -> Message:
        """The partial message after ``delta``."""
        if delta.head is not None:
            self.base = Message.model_validate({**delta.head, "content": []})
        raw, blocks = self.raw[: delta.size], self.blocks[: delta.size]
        replaced: set[int] = set()
        for i, op, value in delta.ops:
            while len(raw) <= i:
                raw.append({})
                blocks.append(_EMPTY)  # replaced below: the op fills it
            if op == "=":
                raw[i] = dict(value)
                replaced.add(i)
            else:
                field = GROWING[str(raw[i].get("type"))]
                grown = str(raw[i].get(field, "")) + str(value)
                raw[i] = {**raw[i], field: grown}
                if i not in replaced:
                    blocks[i] = copied(blocks[i], {field: grown})
        for i in replaced:
            blocks[i] = _BLOCK.validate_python(raw[i])
        self.raw, self.blocks = raw, blocks
        return copied(self.base, {"content": list(blocks)})


def extends(shown: Message, final: Message) -> bool:
    """Whether ``final`` only grows what ``shown`` showed: every shown block is still there, of
    the same kind, text and thinking only appended to, a tool call still the same call (its
    arguments may have grown, an empty ID been filled in)."""
    if len(final.content) < len(shown.content):
        return False
    for old, new in zip(shown.content, final.content, strict=False):
        a, b = old.model_dump(), new.model_dump()
        if a.get("type") != b.get("type"):
            return False
        kind = a.get("type")
        if kind in ("text", "thinking"):
            if not str(b.get(kind, "")).startswith(str(a.get(kind, ""))):
                return False
        elif kind == "tool_call":
            if a.get("name") != b.get("name") or a.get("id") not in ("", b.get("id")):
                return False
        elif a != b:
            return False
    return True
