"""Live deltas: the contract of a store's side channel for a model reply still streaming.

A model call's partial message is published as patches keyed by (session_id, run_id, turn: the
run's model calls counted from 1, across continue-as-new); a reader rebuilds the exact partial
messages (docs/design.md#live-deltas). Turn 0 holds the run's own notes: its cancel note, which a
cancelled run writes so that its calls in flight stop within a fraction of a second
(docs/design.md#cancellation). The channel is a **side** channel: the workflow never sees it (no
history cost) and it is never the source of truth (the stored entry is). Publishing is best
effort; a reader checks every delta's ``(attempt, seq)`` so a lost, late or duplicated write can
never reorder what it shows.

A patch holds the message fields other than ``content`` when they changed (``head``), the
resulting block count (``size``) and per-block operations: ``+`` appends to a text or thinking
block's growing field, ``=`` replaces the block. Any provider's partials round-trip unchanged.

Each store that can carry deltas owns its channel (:class:`LiveStore`): in memory for
``MemoryStore``, side files for ``FileStore``, a collection for ``MongoStore``; worker and client
find it from the store they already share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ..ai.messages import Message
from .ids import validate_session_id

__all__ = [
    "Cursor",
    "Delta",
    "DeltaChannel",
    "DeltaKey",
    "GROWING",
    "ImmediateChannel",
    "LiveStore",
    "Parts",
    "Patch",
    "FASTEST_WRITE",
    "SLOWEST_WRITE",
    "WRITE_EVERY",
    "cancel_note",
    "diff_parts",
    "parts",
]

Cursor = tuple[int, int]
"""``(attempt, seq)`` of the last delta a reader took; ``(0, 0)`` before the first."""


@dataclass(frozen=True)
class DeltaKey:
    """One model reply: its run and its turn (the model call's number in the run, from 1, as
    both the worker and a client following the run's stored entries count it); turn 0 is the
    run's own note key (:func:`cancel_note`)."""

    session_id: str
    run_id: str
    turn: int

    def __post_init__(self) -> None:
        # every channel's file, query or key is named from it: a bad ID is refused before any
        # I/O, as every store refuses it (docs/design.md#sessions-and-entries)
        validate_session_id(self.session_id)

    def name(self) -> str:
        """A string key, unique per reply (session IDs have no ``/``; turns are padded)."""
        return f"{self.session_id}/{self.run_id}/{self.turn:09d}"


WRITE_EVERY = 1.0
"""Seconds between two writes of one reply by default (the first partial is written at once):
the pace a reader of the channel keeps while a reply streams. Each write costs the worker, and
each reader a wake-up, so a second of model time costs about one of each (a front-end reveals a
batch's text over the next second; docs/design.md#live-deltas)."""
FASTEST_WRITE, SLOWEST_WRITE = 0.05, 5.0
"""The bounds of a worker's ``live_every``: faster costs a write and a reader's wake-up per token,
slower leaves a reply's text standing for seconds."""


class Delta(BaseModel):
    """One published patch of one model-call attempt; ``seq`` counts from 1 per attempt."""

    attempt: int
    seq: int
    head: dict[str, Any] | None = None
    size: int = 0
    ops: list[tuple[int, str, Any]] = Field(default_factory=list)
    final: bool = False
    """The attempt's last delta: the reply is complete and about to be stored (a reader
    looks for its entry now rather than at its next idle poll)."""
    at: float | None = None
    """When the writer wrote it (its clock, seconds since the epoch): a reader times its next
    read just after the writer's next write, ``every`` later."""
    every: float | None = None
    """The writer's seconds between two writes (``None``: ``WRITE_EVERY``): each worker writes at
    its own pace, and its readers keep it (docs/design.md#live-deltas)."""
    parent: str | None = None
    """On an attempt's first delta: the entry the reply will hang off (its stamp's parent). A
    reader that learnt the run's leaf before the run's last commit returned to it (a query
    answered while the commit was in flight) names the reply's parent right all the same
    (``None``: not said, by a writer of an earlier version)."""


class DeltaChannel(Protocol):
    """Where a ``call_model`` activity publishes its reply's deltas and clients read them."""

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        """Store one delta; may raise (the writer then stops publishing for its attempt)."""

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        """Deltas past ``after`` in ``(attempt, seq)`` order (``[]`` once cleared)."""

    async def clear(self, key: DeltaKey) -> None:
        """Drop a reply's deltas (its message is stored)."""


@runtime_checkable
class ImmediateChannel(Protocol):
    """A channel whose calls never wait for anything but a small local file call (a FileStore's
    side files): the writer, the reader and the cancel watch call these on the event loop, with
    no task, timer or timeout of their own, since each of those costs a streaming reply's
    worker and client more than the call (docs/design.md#live-deltas)."""

    def publish_now(self, key: DeltaKey, delta: Delta) -> None:
        """:meth:`DeltaChannel.publish`, done now."""

    def read_now(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        """:meth:`DeltaChannel.read`, done now."""

    def held_now(self, keys: list[DeltaKey]) -> set[DeltaKey]:
        """Which of ``keys`` hold any delta (a worker's cancel notes), now."""


def cancel_note(session_id: str, run_id: str) -> tuple[DeltaKey, Delta]:
    """The key and delta of a run's cancel note: any delta under its turn-0 key means the run
    was cancelled (readers of replies never read turn 0)."""
    return DeltaKey(session_id, run_id, 0), Delta(attempt=0, seq=1, head={"cancelled": True})


@runtime_checkable
class LiveStore(Protocol):
    """A store that carries live deltas beside its sessions: one channel per store object, so
    every worker and client holding that store (or one on the same backend) meets there."""

    def live_deltas(self) -> DeltaChannel: ...


GROWING = {"text": "text", "thinking": "thinking"}
"""Block types whose field grows by ``+`` ops, and that field."""


Parts = tuple[dict[str, Any] | None, list[dict[str, Any]]]
"""A message as a patch sees it: its fields other than ``content`` (``None`` for no message) and
its blocks, as JSON."""
Patch = tuple[dict[str, Any] | None, int, list[tuple[int, str, Any]]]
"""``(head, size, ops)`` of a :class:`Delta`."""


def parts(message: Message | None) -> Parts:
    """``message`` split for :func:`diff_parts` (a writer keeps the parts it last sent, so each
    write dumps only the newer message)."""
    if message is None:
        return None, []
    data = message.model_dump(mode="json")
    blocks = data.pop("content", [])
    return data, blocks


def diff_parts(prev: Parts, cur: Parts) -> Patch | None:
    """The patch turning the message of ``prev`` into that of ``cur``; ``None`` when they are
    equal."""
    prev_head, prev_blocks = prev
    head, blocks = cur
    ops: list[tuple[int, str, Any]] = []
    for i, block in enumerate(blocks):
        old = prev_blocks[i] if i < len(prev_blocks) else None
        if old == block:
            continue
        field = GROWING.get(str(block.get("type")))
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
