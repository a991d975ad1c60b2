"""Compaction: summarize the path so far into one appended entry (docs/design.md#compaction).

One flow for both executors (:func:`compact`): summarize, stamp the entry at the leaf, commit it,
publish ``session_compacted``. Each executor supplies the effects (:class:`CompactionEffects`):
in process the handle's state and publisher, on Temporal the compaction workflow's activities.
The summary itself (:func:`summary_entry`: plan, then run the summarizer) is the same function in
the handle and in the ``summarize`` activity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..agent.loop import Factory, build_loop
from ..agent.options import AgentOptions
from ..ai.messages import (
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    user_message,
)
from ..session.approvals import awaiting_turn
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.turns import is_turn_start
from ..session.views import model_view
from .errors import CompactError, NoFactoryError
from .events import Event
from .persist import CommitEffects, stamp
from .publisher import compacted_event

__all__ = [
    "DEFAULT_COMPACT_PROMPT",
    "CompactionEffects",
    "CompactionPlan",
    "compact",
    "estimate_tokens",
    "plan_compaction",
    "summarize",
    "summary_entry",
]

DEFAULT_COMPACT_PROMPT = (
    "Summarize the conversation so far. Preserve every fact, decision, and open question in a "
    "compact form."
)


@dataclass(frozen=True)
class CompactionPlan:
    first_kept_id: str
    prefix: list[Entry]
    """The path entries the summary stands for."""
    tokens_before: int


def _chars(message: Message) -> int:
    total = 0
    for block in message.content:
        if isinstance(block, TextContent):
            total += len(block.text)
        elif isinstance(block, ThinkingContent):
            total += len(block.thinking)
        elif isinstance(block, ToolCall):
            args = json.dumps(block.arguments, ensure_ascii=False, separators=(",", ":"))
            total += len(block.name) + (len(args) if block.arguments else 0)
    return total


def estimate_tokens(view: Sequence[Message]) -> int:
    """``R + ceil(C / 4)``: the last reported input size plus ~4 characters per token after it."""
    reported, start = 0, 0
    for i in range(len(view) - 1, -1, -1):
        usage = view[i].usage
        if view[i].role == "assistant" and usage is not None and usage.input > 0:
            reported = usage.input + usage.cache_read + usage.cache_write + usage.output
            start = i + 1
            break
    chars = sum(_chars(m) for m in view[start:])
    return reported + math.ceil(chars / 4)


def plan_compaction(path: Sequence[Entry], keep_turns: int = 0) -> CompactionPlan | None:
    """What to summarize, or ``None`` when there is nothing to do: no turn beyond those kept,
    or nothing but the last compaction's summary before them (summarized again, it would be
    the same summary, paid for again)."""
    if keep_turns < 0:
        raise ValueError("keep_turns must be >= 0")
    starts = [i for i, e in enumerate(path) if is_turn_start(e)]
    if not starts or len(starts) <= keep_turns:
        return None
    last = max((i for i, e in enumerate(path) if isinstance(e, CompactionEntry)), default=-1)
    tokens = estimate_tokens(model_view(_reports_after(path, last)))
    cut = starts[len(starts) - keep_turns] if keep_turns > 0 else len(path)
    # what an earlier compaction summarized stays summarized: the view never grows
    kept = _kept_start(path, last)
    cut = max(cut, kept)
    waiting = awaiting_turn(path)
    if waiting is not None:
        # calls that wait for people stay verbatim: the kept tail starts no later than their
        # turn (docs/design.md#approvals-and-steering)
        cut = min(cut, max((s for s in starts if s <= waiting.index), default=0))
    if cut == 0 or (last >= 0 and cut <= kept):
        return None
    if cut < len(path):
        return CompactionPlan(path[cut].id, list(path[:cut]), tokens)
    return CompactionPlan("", list(path), tokens)


def _kept_start(path: Sequence[Entry], last: int) -> int:
    """Where the model view of ``path`` goes verbatim after the compaction at ``last``: its
    first kept entry, else the entry after it (0 with none)."""
    if last < 0:
        return 0
    kept = path[last]
    assert isinstance(kept, CompactionEntry)
    return next((i for i in range(last) if path[i].id == kept.first_kept_id), last + 1)


def _reports_after(path: Sequence[Entry], last: int) -> list[Entry]:
    """``path`` without the usage of replies stored before the compaction at ``last``: a kept
    reply's reported input measured the context before that compaction, not the view."""
    return [
        e.model_copy(update={"message": e.message.model_copy(update={"usage": None})})
        if i < last and isinstance(e, MessageEntry) and e.message.usage is not None
        else e
        for i, e in enumerate(path)
    ]


async def summarize(
    factory: Factory | None,
    options: AgentOptions,
    prefix: Sequence[Entry],
    prompt: str | None = None,
) -> str:
    """Run the summarizer (no tools, one turn, same system prompt) and return its text."""
    if factory is None:
        raise NoFactoryError("this agent has no factory, so it cannot summarize")
    summarizer_options = options.model_copy(
        update={"tools": (), "max_turns": 1, "history": model_view(prefix)}
    )
    try:
        loop = await build_loop(factory, summarizer_options)
    except Exception as exc:
        raise CompactError(f"build summarizer: {exc}") from exc
    try:
        messages = await loop.run([user_message(prompt or DEFAULT_COMPACT_PROMPT)]).wait()
    except Exception as exc:
        raise CompactError(f"summarizer failed: {exc}") from exc
    finally:
        await loop.aclose()
    replies = [m for m in messages if m.role == "assistant"]
    if not replies:
        raise CompactError("summarizer produced no assistant message")
    last = replies[-1]
    if last.stop_reason in ("error", "aborted"):
        raise CompactError(f"summarizer stopped with {last.stop_reason}")
    text = last.text().strip()
    if not text:
        raise CompactError("summarizer returned an empty summary")
    return last.text()


async def summary_entry(
    factory: Factory | None,
    options: AgentOptions,
    path: Sequence[Entry],
    keep_turns: int = 0,
    prompt: str | None = None,
) -> CompactionEntry | None:
    """The compaction entry for ``path`` (its header not stamped yet), or ``None`` when there is
    nothing to compact."""
    plan = plan_compaction(path, keep_turns)
    if plan is None:
        return None
    text = await summarize(factory, options, plan.prefix, prompt)
    return CompactionEntry(
        summary=text, first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before
    )


class CompactionEffects(CommitEffects, Protocol):
    """What a compaction does outside the flow: stamping and the commit (as a run's), the
    summary of the path at the leaf, and the publication."""

    async def summarize(self, keep_turns: int, prompt: str | None) -> CompactionEntry | None: ...

    async def publish(self, event: Event) -> None: ...


async def compact(
    effects: CompactionEffects,
    session_id: str,
    leaf_id: str,
    keep_turns: int = 0,
    prompt: str | None = None,
) -> CompactionEntry | None:
    """Summarize the path at ``leaf_id``, store the entry after it and announce it; ``None``
    when there was nothing to compact. The caller holds the session still (the handle's busy
    rule), so ``leaf_id`` is the leaf the entry chains from."""
    entry = await effects.summarize(keep_turns, prompt)
    if entry is None:
        return None
    stamped = await effects.commit(stamp([entry], leaf_id, effects.now(), effects.new_id))
    stored = stamped.durable[0]
    assert isinstance(stored, CompactionEntry)
    await effects.publish(compacted_event(session_id, stored))
    return stored
