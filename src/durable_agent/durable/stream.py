"""Run streams: what ``await agent.run(...)`` returns.

Events arrive in order, each ``message_end`` carrying its receipt. The producer never waits for a
consumer (the buffer is unbounded): breaking out of ``events()`` stops delivery, not persistence.
Failures surface from ``wait()``, and from ``events()`` after its last event.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from ..ai.messages import Message
from ..session.approvals import PendingItem
from ..session.entries import Entry, MessageEntry
from .errors import RunCancelledError, RunNotAcceptingError
from .events import Event
from .inbox import When
from .inputs import EntryLike, as_entry, check_run_input
from .limits import check_entry

Sender = Callable[[MessageEntry, When], Awaitable[Entry]]
"""Hands a message to the live run (in process its inbox, on Temporal the ``send`` update)."""

__all__ = ["LocalRunStream", "RunStream", "Sender", "fail"]


class RunStream(abc.ABC):
    """The stream of one run: ``events()`` once, ``wait()``, ``cancel()``."""

    def __init__(self, *, run_id: str = "", sender: Sender | None = None) -> None:
        self._events_taken = False
        self._ended = False
        self._end_callbacks: list[Callable[[], None]] = []
        self._sender = sender
        self.run_id = run_id
        self.pending: list[PendingItem] = []
        """After a run that parked: the calls still waiting for a decision (empty otherwise)."""
        self.live_wanted: Callable[[], bool] = lambda: True
        """Whether the reader of :meth:`events` wants a reply's live updates now, asked before
        each read of them from a channel (on Temporal): a server relaying a run no browser
        watches says no, and the run's receipts still come. Wanted again, a reply shown in part
        comes whole (``restart``)."""

    def __repr__(self) -> str:
        return f"<RunStream run_id={self.run_id!r} {'ended' if self._ended else 'running'}>"

    async def send(self, entry: EntryLike, *, when: When = "next_turn") -> Entry:
        """Hand the live run a message; returns its stored entry once delivered: a steer
        (``next_turn``) after the current turn's tool results, a follow-up (``at_end``) when
        the loop would stop (docs/design.md#approvals-and-steering). Raises
        :class:`InvalidRunInputError` for a blank message, :class:`PayloadTooLargeError` for one
        over the payload limit (both before the run sees it), :class:`RunNotAcceptingError`
        when the run ended, is ending or holds 16 queued."""
        message = as_entry(entry)
        if not isinstance(message, MessageEntry) or message.ephemeral:
            raise TypeError("send takes text or a stored (non-ephemeral) message entry")
        if when not in ("next_turn", "at_end"):
            raise ValueError(f"when must be 'next_turn' or 'at_end', not {when!r}")
        # as the HTTP API checks it: the run would store a blank one and call the model on it,
        # and fail storing one over the limit
        check_entry(message, "message")
        check_run_input([message], nothing_stored=False)
        if self._sender is None or self._ended:
            raise RunNotAcceptingError("the run has ended: start a new run with the message")
        return await self._sender(message, when)

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the run has ended (at once if it already has), before
        ``events()`` or ``wait()`` report the end. The handle clears its busy flag this way."""
        if self._ended:
            callback()
        else:
            self._end_callbacks.append(callback)

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        callbacks, self._end_callbacks = self._end_callbacks, []
        for callback in callbacks:
            callback()

    @property
    def events_taken(self) -> bool:
        """Whether :meth:`events` was called (someone reads the events, live updates too)."""
        return self._events_taken

    def events(self) -> AsyncIterator[Event]:
        """The run's events in order; may be called once."""
        if self._events_taken:
            raise RuntimeError("events() may be called only once per run stream")
        self._events_taken = True
        return self._iterate()

    @abc.abstractmethod
    def _iterate(self) -> AsyncIterator[Event]: ...

    @abc.abstractmethod
    async def wait(self) -> list[Message]:
        """The messages of the ``message_end`` receipts; raises the run's failure."""

    @abc.abstractmethod
    async def cancel(self) -> None:
        """Cancel the run; what the user saw is stored, then ``wait()`` raises
        RunCancelledError."""

    @abc.abstractmethod
    async def detach(self) -> None:
        """Stop following the run, which goes on where it runs (a Temporal run, on its
        workers): what follows it (a long poll of its end, reads of the store) ends with this
        call, as an application that stops ends its own work."""


_DONE = object()


class LocalRunStream(RunStream):
    """An in-process run: a producer task feeding an unbounded queue."""

    def __init__(
        self,
        produce: Callable[[Callable[[Event], None]], Coroutine[Any, Any, list[Message]]],
        *,
        on_cancel: Callable[[], Awaitable[None]] | None = None,
        run_id: str = "",
        sender: Sender | None = None,
    ) -> None:
        """``on_cancel`` replaces cancelling the producer (a remote run is asked to cancel)."""
        super().__init__(run_id=run_id, sender=sender)
        self._on_cancel = on_cancel
        self._started = False
        self._cancel_requested = False
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(produce))
        self._task.add_done_callback(self._task_done)

    async def _run(
        self, produce: Callable[[Callable[[Event], None]], Coroutine[Any, Any, list[Message]]]
    ) -> list[Message]:
        self._started = True
        try:
            return await produce(self._queue.put_nowait)
        finally:
            self._end()
            self._queue.put_nowait(_DONE)

    def _task_done(self, task: asyncio.Task[list[Message]]) -> None:
        if not task.cancelled():
            task.exception()  # surfaced by wait()/events(); never "unretrieved"
        if not self._started:
            # Cancelled before its first step: nothing ran, nothing was stored.
            self._end()
            self._queue.put_nowait(_DONE)

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            item = await self._queue.get()
            if item is _DONE:
                break
            assert isinstance(item, Event)
            yield item
        await self.wait()

    async def wait(self) -> list[Message]:
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled():
                # the producer was cancelled outside the engine's cancel path (before it started,
                # or while storing the input): still a cancelled run, not the caller's cancellation
                raise RunCancelledError("run cancelled") from None
            raise

    async def detach(self) -> None:
        """A remote run's follower stops, the run left alone; an in-process run is its
        producer: it is cancelled (:meth:`cancel`), as it would be with its process."""
        if self._on_cancel is None:
            await self.cancel()
            return
        self._task.cancel()
        await asyncio.wait({self._task})

    async def cancel(self) -> None:
        """Cancel the producer, or (for a remote run) ask the run to cancel and let the producer
        drain what it stores while cancelling."""
        if not self._task.done() and not self._cancel_requested:
            # Once only: a second cancel would interrupt the (shielded) storing of what the
            # cancelled run leaves, ending the producer before its cancellation results are stored.
            self._cancel_requested = True
            if self._on_cancel is not None:
                await self._on_cancel()
            else:
                self._task.cancel()
        await asyncio.wait({self._task})


class _FailedStream(RunStream):
    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self._exc = exc
        self._end()

    async def _iterate(self) -> AsyncIterator[Event]:
        raise self._exc
        yield  # pragma: no cover

    async def wait(self) -> list[Message]:
        raise self._exc

    async def cancel(self) -> None:
        return None

    async def detach(self) -> None:
        return None


def fail(exc: BaseException) -> RunStream:
    """An event-less stream whose ``wait()``/``events()`` raise ``exc``; a middleware returning it
    refuses the run (no model call, nothing stored)."""
    return _FailedStream(exc)
