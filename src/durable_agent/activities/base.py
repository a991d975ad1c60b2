"""What every activity shares: the worker's store and agents, heartbeats, the stamped commit.

Activities get the active path by ``(session_id, leaf_id)`` instead of receiving the
transcript, so workflow history stays bounded: from the entries this worker stored or loaded
(its store is a :class:`~durable_agent.stores.RememberingStore`), else from a load. Errors
leave as ``ApplicationError`` with the original exception's type name (:mod:`.failures`), which
decides retries (only ``StoreUnavailableError`` among store errors, only retryable
``ModelError``s among model errors) and lets the client re-raise the same error type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityHandle

from ..ai.messages import Message
from ..durable.cancel_notes import CancelWatch, Watched
from ..durable.errors import PersistError
from ..durable.limits import PAYLOAD_LIMIT
from ..durable.live import LiveDeltas, live_channel
from ..durable.persist import Header
from ..durable.publisher import PublisherLike
from ..session.appendplan import encode_batch
from ..session.deltas import WRITE_EVERY
from ..session.entries import Entry, MessageEntry
from ..session.errors import (
    EntryConflictError,
    EntryEncodeError,
    SessionError,
    StoreUnavailableError,
)
from ..session.ids import quoted
from ..session.store import Store
from ..stores.remembering import DEFAULT_KNOWN_ENTRIES, RememberingStore
from .failures import application_error, checked_payload
from .spec import AgentSpec

__all__ = [
    "DEFAULT_PAYLOAD_LIMIT",
    "FIRST_BEAT",
    "NEXT_BEAT",
    "ActivityBase",
    "heartbeating",
    "is_retry",
    "noted_run",
    "producer_answer",
    "run_cancelled",
]

logger = logging.getLogger("durable_agent.activities")

DEFAULT_PAYLOAD_LIMIT = PAYLOAD_LIMIT  # the one limit (durable/limits.py)
FIRST_BEAT = 0.5
"""The first heartbeat goes out this fraction of the heartbeat timeout into the call."""
NEXT_BEAT = 0.8
"""Later ones this fraction of the timeout apart (the SDK's own throttle interval)."""


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[None]:
    """Heartbeat in the background, so a crashed worker is noticed within the heartbeat timeout
    even while a model has not produced its first token or a tool is busy.

    A heartbeat that reaches the server is a billed action, and it no longer carries anything a
    call waits for (a run's cancellation reaches its calls through the run's cancel note,
    docs/design.md#cancellation). So the first beat goes out halfway through the heartbeat
    timeout and the next ones 0.8 timeouts apart: a call shorter than half the timeout sends
    none, a longer one one per 0.8 timeouts, and the server still hears from a live worker well
    within every timeout. Hold one context for the whole activity (a second one would restart
    the schedule). Without a heartbeat timeout there is nothing to beat for."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if info.is_local or not timeout:
        # a local activity has no heartbeat: the workflow task it runs in is its liveness
        yield
        return
    seconds = timeout.total_seconds()

    async def beat() -> None:
        await asyncio.sleep(seconds * FIRST_BEAT)
        while True:
            activity.heartbeat()
            await asyncio.sleep(seconds * NEXT_BEAT)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        # Not awaited: a cancelled beat sends nothing more (it is parked in a sleep, where the
        # cancellation lands), and waiting for it to wind down cost a loop iteration on the
        # critical path of every model and tool call (two per call).
        task.cancel()
        _winding_down.add(task)
        task.add_done_callback(_wound_down)


_winding_down: set[asyncio.Task[None]] = set()
"""Cancelled heartbeat tasks, held until they finish (the loop holds only weak references)."""


def _wound_down(task: asyncio.Task[None]) -> None:
    _winding_down.discard(task)
    failure = None if task.cancelled() else task.exception()
    if failure is not None:
        logger.warning("heartbeat task failed", exc_info=failure)


def noted_run(run_id: str) -> str:
    """The run part of a cancel note's key: the run and the workflow execution (of this
    activity) whose calls the note stops. A run ID outlives its execution (an operator's reset,
    or a start under a closed run's workflow ID), and the note a cancelled execution leaves for a
    minute would stop the next one's calls at once (docs/design.md#cancellation)."""
    return f"{run_id}.{activity.info().workflow_run_id}"


class ActivityBase:
    """One worker's store, named agents and publisher, and the helpers every activity uses."""

    def __init__(
        self,
        store: Store,
        agents: Mapping[str, AgentSpec],
        publisher: PublisherLike | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        live_deltas: LiveDeltas = "auto",
        live_every: float = WRITE_EVERY,
        known_entries: int = DEFAULT_KNOWN_ENTRIES,
    ) -> None:
        self.store = RememberingStore(store, max_bytes=known_entries)
        """The worker's store, remembering what it stored or loaded (``known_entries`` bytes), so
        a path rarely costs a session load."""
        self.agents = dict(agents)
        self.publisher = publisher
        self.payload_limit = payload_limit
        self.deltas = live_channel(live_deltas, store)
        """Where ``call_model`` publishes its streaming reply (docs/design.md#live-deltas)."""
        self.live_every = live_every
        """Seconds between two writes of a streaming reply's deltas."""
        self.cancels = None if self.deltas is None else CancelWatch(self.deltas)
        """The cancel notes of the runs whose calls are in flight here."""

    def watching(
        self, session_id: str, run_id: str
    ) -> contextlib.AbstractContextManager[Watched | None]:
        """Stop the current call when its run's cancel note appears (docs/design.md#cancellation):
        the block's task is cancelled; the context's ``fired`` tells that from Temporal's own
        cancellation. Nothing is watched without a channel or a run."""
        if self.cancels is None or not run_id:
            return contextlib.nullcontext()
        return self.cancels.watching(session_id, noted_run(run_id))

    def agent_spec(self, name: str) -> AgentSpec:
        """The named agent; an unknown name fails the activity for good."""
        spec = self.agents.get(name)
        if spec is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ApplicationError(
                f"unknown agent {quoted(name)} (this worker has: {known})",
                type="UnknownAgentError",
                non_retryable=True,
            )
        return spec

    async def stored_entries(self, session_id: str) -> list[Entry]:
        """The whole session, loaded (and so remembered)."""
        try:
            return await self.store.load_entries(session_id)
        except SessionError as exc:
            raise application_error(exc) from exc

    async def path_to(self, session_id: str, leaf_id: str, *, confirm: bool = False) -> list[Entry]:
        """The path to ``leaf_id``: from what this worker remembers, else from a load; a leaf
        the session lacks fails for good. ``confirm`` (a run's start): what is remembered counts
        only for the session the store holds now (RememberingStore.path)."""
        try:
            found = await self.store.path(session_id, leaf_id, confirm=confirm)
        except SessionError as exc:
            raise application_error(exc) from exc
        if leaf_id and not found:
            raise ApplicationError(
                f"leaf {quoted(leaf_id)} is not an entry of session {session_id!r}",
                type="EntryNotFoundError",
                non_retryable=True,
            )
        return found

    async def stored_earlier(
        self, session_id: str, stamp: Header, call: str
    ) -> MessageEntry | None:
        """What an earlier attempt of this activity stored under ``stamp``, looked up on a
        retry only (see :func:`is_retry`); ``None`` on a first attempt or if nothing is stored."""
        if not is_retry():
            return None
        stored = find_entry(await self.stored_entries(session_id), stamp.id)
        return None if stored is None else stored_message(stored, call)

    def check_size(self, what: str, payload: str) -> None:
        checked_payload(what, payload, self.payload_limit)

    @staticmethod
    def storable(session_id: str, entry: Entry, what: str = "message") -> str:
        """``entry``'s wire. One no store can write (data nested deeper than the encoder goes,
        say) fails the activity as the store's refusal fails an in-process run: ``persist
        <what>: ...``, not retried (another attempt would make the same bytes, and call the
        model again for them)."""
        try:
            [(_, wire)] = encode_batch(session_id, [entry])
        except EntryEncodeError as exc:
            error = PersistError(f"persist {what}: {exc}")
            raise application_error(error, non_retryable=True) from None
        return wire

    async def commit(
        self,
        session_id: str,
        stamp: Header,
        message: Message,
        what: str = "message",
        then: Callable[[MessageEntry], Sequence[Entry]] = lambda _: (),
    ) -> MessageEntry:
        """Append ``message`` under the run's stamp and return what the store holds for it: a
        conflicting earlier write (a zombie attempt) wins, so workflow and store agree.
        ``then``: entries stored in the same append right after it (a reply's approval
        requests, docs/design.md#approvals-and-steering)."""
        entry = stamp.on(MessageEntry(message=message))
        self.check_size("entry", self.storable(session_id, entry, what))
        try:
            try:
                await self.store.append_entries(session_id, [entry, *then(entry)])
                return entry
            except EntryConflictError:
                stored = find_entry(await self.store.load_entries(session_id), stamp.id)
        except SessionError as exc:
            retryable = isinstance(exc, StoreUnavailableError)
            raise application_error(
                PersistError(f"persist {what}: {exc}"), non_retryable=not retryable
            ) from exc
        assert isinstance(stored, MessageEntry), "a conflicting entry is stored under the stamp"
        return stored


T = TypeVar("T")


async def producer_answer(
    handle: ActivityHandle[T], on_cancel: Callable[[], Awaitable[None]] | None = None
) -> T:
    """A producing activity's answer (workflow side), even when the run's cancellation arrives
    with it.

    A producer commits its output under a header the run reserved, so its answer must reach the
    engine whatever happens. Awaited directly, an answer that arrives in the same workflow
    activation as the run's cancellation is dropped for the ``CancelledError`` (the SDK raises
    the cancellation over a completed activity), and the store would hold an entry the run never
    recorded. So the activity runs as its own handle and the cancellation interrupts only the
    wait: an answer already on its way is taken; otherwise the activity is asked to stop (it
    waits for its cancellation to complete, so it answers what it stored meanwhile, or fails as
    cancelled) and ``on_cancel`` runs: the run's cancel note, which the activity sees within a
    fraction of a second (docs/design.md#cancellation). The caller checks
    ``workflow.cancellation_reason()`` to go on cancelling."""
    try:
        return await asyncio.shield(handle)
    except asyncio.CancelledError:
        for _ in range(3):  # an answer of this activation reaches the handle within a few steps
            if handle.done():
                break
            await asyncio.sleep(0)
        if not handle.done():
            handle.cancel()
            if on_cancel is not None:
                await on_cancel()
    while True:
        try:
            return await asyncio.shield(handle)
        except asyncio.CancelledError:
            if handle.done():
                raise  # the activity ended cancelled


def run_cancelled(watched: Watched | None) -> bool:
    """Whether a ``CancelledError`` in an activity is its run's cancellation: the run's cancel
    note (``watched.fired``) or Temporal's cancel request, not a worker shutting down."""
    if watched is not None and watched.fired:
        return True
    details = activity.cancellation_details()
    return details is not None and details.cancel_requested


def is_retry() -> bool:
    """Whether this activity attempt follows an earlier one of the same activity.

    The workflow stamps each output with a fresh ID and schedules exactly one activity with it
    (a replayed or retried workflow task regenerates the same command, which the server does not
    schedule again; a reset or continue-as-new draws new IDs). So only a retry can find its stamp
    stored (the earlier attempt committed, then crashed or lost the race): the first attempt
    skips that lookup, and with it a whole-session load. A first attempt that still meets a
    stored stamp (a bug, or a hand-made input) is settled by the commit: first writer wins.
    """
    return activity.info().attempt > 1


def find_entry(entries: list[Entry], entry_id: str) -> Entry | None:
    for entry in reversed(entries):
        if entry.id == entry_id:
            return entry
    return None


def stored_message(entry: Entry, call: str) -> MessageEntry:
    """``entry``, stored under a ``call``'s stamp, as the message entry it must be."""
    if not isinstance(entry, MessageEntry):
        raise ApplicationError(
            f"entry {entry.id!r} under the {call}'s stamp is not a message",
            type="EntryConflictError",
            non_retryable=True,
        )
    return entry
