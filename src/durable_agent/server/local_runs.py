"""Runs in the server process (``create_app(agents=...)``, for development): a run lives and
dies with the process, and only the handle running it can hand it a decision or a message
(docs/design.md#http-api)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial

from ..activities.spec import AgentSpec
from ..agent.loop import model
from ..durable.agent import Agent, new
from ..durable.errors import RunActiveError
from ..durable.inbox import When
from ..durable.stream import RunStream
from ..session.approvals import ApprovalDecision
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.ids import new_id
from ..session.store import RetentionStore, Store, created_at_of
from .deciding import SessionLocks, continue_settled, decide_at_leaf, decide_with
from .relay import RunRelay
from .runs import (
    REMEMBERED,
    Accepted,
    OnBusy,
    RunFailure,
    RunListener,
    RunNotFoundError,
    Status,
    cancel_each,
    made_for_start,
    no_run_accepts,
    open_at,
    pick_agent,
    refuse_busy,
)

__all__ = ["LocalRuns"]

logger = logging.getLogger("durable_agent.server")


class LocalRuns:
    """Agents run in this process; a run is lost with the process (development)."""

    local = True

    def __init__(self, store: Store, agents: Mapping[str, AgentSpec], listener: RunListener):
        self.store = store
        self.agents = dict(agents)
        self.listener = listener
        self._streams: dict[str, dict[str, RunStream]] = {}
        self._handles: dict[tuple[str, str], Agent] = {}
        self._ended: dict[tuple[str, str], tuple[Status, RunFailure | None]] = {}
        self._accepted = Accepted()
        self._dropped: set[tuple[str, str]] = set()
        """Runs of deleted sessions still going: their ends are not remembered."""
        self._born: dict[tuple[str, str], datetime | None] = {}
        """The ``created_at`` of the session each going run started in (:meth:`active`)."""
        self._tasks: set[asyncio.Task[object]] = set()
        self._compacting: set[str] = set()
        self._lock = asyncio.Lock()
        self._deciding = SessionLocks()
        self._sending = SessionLocks()

    async def start(
        self,
        session_id: str,
        entries: Sequence[Entry],
        *,
        leaf_id: str | None,
        agent: str | None,
        on_busy: OnBusy,
        run_id: str | None = None,
    ) -> str:
        spec = self.agents[self.agent(agent)]
        async with self._lock:  # the busy check and the start, one at a time
            if run_id is not None and await self.has(session_id, run_id):
                return run_id  # a retried start: that run, nothing new
            refuse_busy(session_id, await self.active(session_id), on_busy)
            self._refuse_compacting(session_id)
            async with made_for_start(self.store, session_id):
                handle = await open_at(await _open(self.store, spec, session_id), leaf_id)
                born = await created_at_of(self.store, session_id)
                run_id = run_id or new_id()
                stream = await handle.run(*entries, run_id=run_id, if_unchanged=on_busy == "reject")
            self._born[(session_id, run_id)] = born
            self._streams.setdefault(session_id, {})[run_id] = stream
            self._handles[(session_id, run_id)] = handle
            relay = RunRelay(self.listener, handle, stream, run_id)  # before the run moves
        self.listener.run_status(session_id, run_id, relay.status)
        self._spawn(self._relay(relay))
        return run_id

    def agent(self, name: str | None) -> str:
        return pick_agent(list(self.agents), name)

    def _spawn(self, work: asyncio.Future[object] | object) -> asyncio.Task[object]:
        task: asyncio.Task[object] = asyncio.ensure_future(work)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _relay(self, relay: RunRelay) -> None:
        """Tell the listener what the run does (:class:`~.relay.RunRelay`); forget the run as
        it ends."""
        sid, run_id = relay.handle.session_id, relay.run_id

        def ended(status: Status, failure: RunFailure | None) -> None:
            going = self._streams.get(sid, {})
            going.pop(run_id, None)
            if not going:  # else one map per session ever run, kept for good
                self._streams.pop(sid, None)
            self._handles.pop((sid, run_id), None)
            self._born.pop((sid, run_id), None)
            if (sid, run_id) in self._dropped:
                self._dropped.discard((sid, run_id))  # its session was deleted meanwhile
                return
            self._ended[(sid, run_id)] = (status, failure)
            while len(self._ended) > REMEMBERED:
                del self._ended[next(iter(self._ended))]

        status, last = await relay.run()
        failure = None if relay.error is None else RunFailure.of(relay.error)
        ended(status, failure)
        self.listener.run_status(sid, run_id, status, last, failure)

    async def cancel(self, session_id: str, run_id: str) -> None:
        stream = self._streams.get(session_id, {}).get(run_id)
        if stream is None:
            if (session_id, run_id) in self._ended:
                return
            raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}")
        self._spawn(stream.cancel())

    async def active(self, session_id: str) -> list[str]:
        """The session's runs going, but those of a session of its ID deleted meanwhile by
        another process (``sessions rm``), which this one learns here: they go as on a delete
        through the API, and nothing of them reaches the session created again under the ID
        (docs/design.md#retention)."""
        going = self._going(session_id)
        if going and isinstance(self.store, RetentionStore):
            now = await created_at_of(self.store, session_id)
            if any(self._born.get((session_id, run_id)) != now for run_id in going):
                await self.session_deleted(session_id, self.listener.deleted(session_id))
        return self._going(session_id)

    def _going(self, session_id: str) -> list[str]:
        runs = self._streams.get(session_id, {})
        return [run_id for run_id in runs if (session_id, run_id) not in self._dropped]

    async def session_deleted(self, session_id: str, run_ids: Sequence[str]) -> None:
        """Cancel its runs and forget its ended ones and its messages: their IDs name new ones
        of the session created again under the ID (and those still going, once they end)."""
        going = self._going(session_id)
        self._dropped.update((session_id, run_id) for run_id in going)
        await cancel_each(self, session_id, [*run_ids, *going])
        for key in [k for k in self._ended if k[0] == session_id]:
            del self._ended[key]
        self._accepted.forget(session_id)

    async def has(self, session_id: str, run_id: str) -> bool:
        """A run this process runs or remembers (it forgets its runs when it stops)."""
        return run_id in await self.active(session_id) or (session_id, run_id) in self._ended

    def relayed(self, session_id: str, run_id: str) -> Status | None:
        handle = self._handles.get((session_id, run_id))
        if handle is None:
            return None
        return "awaiting_approval" if handle.pending_approvals() else "started"

    async def status(self, session_id: str, run_id: str) -> Status:
        going = self.relayed(session_id, run_id)
        if going is not None:
            return going
        try:
            return self._ended[(session_id, run_id)][0]
        except KeyError:
            raise RunNotFoundError(f"no run {run_id!r} in session {session_id!r}") from None

    async def failure(self, session_id: str, run_id: str) -> RunFailure | None:
        return self._ended.get((session_id, run_id), ("failed", None))[1]

    async def send(
        self, session_id: str, entry: MessageEntry, when: When, message_id: str | None = None
    ) -> tuple[str, str]:
        """Queue ``entry`` in the session's running run; answers once the run accepted it
        (its delivery is a receipt on the stream). One send of the session at a time: a
        resend arriving before the first one's answer finds it handed on."""
        async with self._sending(session_id):
            return await self._send(session_id, entry, when, message_id)

    async def _send(
        self, session_id: str, entry: MessageEntry, when: When, message_id: str | None
    ) -> tuple[str, str]:
        born = await created_at_of(self.store, session_id)
        accepted = self._accepted.run_of(session_id, message_id, born)
        if accepted is not None and message_id is not None:
            return accepted, message_id  # a retried request: handed on once
        for run_id in await self.active(session_id):
            stream = self._streams.get(session_id, {}).get(run_id)
            if stream is None:
                continue  # it ended meanwhile
            sending = self._spawn(stream.send(entry, when=when))
            # one loop step: the send runs up to the run's inbox, which queues the message or
            # refuses it, before this goes on (nothing in between waits)
            await asyncio.sleep(0)
            if sending.done() and sending.exception() is not None:
                continue  # that run takes no more messages
            sending.add_done_callback(_undelivered)
            message_id = message_id or new_id()
            self._accepted.add(session_id, message_id, run_id, born)
            return run_id, message_id
        raise no_run_accepts(session_id)

    async def decide(self, session_id: str, decision: ApprovalDecision) -> tuple[Entry, str | None]:
        """The handle of the run that waits for the call takes the decision; with none, it is
        committed at the session's leaf (one at a time: :func:`.deciding.decide_at_leaf`) and,
        when that settles the turn, a run carries out the turn's calls."""
        for run_id in await self.active(session_id):
            handle = self._handles.get((session_id, run_id))
            waiting = () if handle is None else handle.pending_approvals()
            if handle is not None and decision.tool_call_id in {p.tool_call_id for p in waiting}:
                entry = await decide_with(handle, decision)
                # a run that parked just then left it at the leaf: it may settle the turn
                return entry, await continue_settled(self, self.store, session_id)
        opened = partial(new, None, store=self.store, session_id=session_id, create=False)
        return await decide_at_leaf(self, self.store, self._deciding, session_id, decision, opened)

    async def compact(
        self, session_id: str, keep_turns: int, *, leaf_id: str | None, agent: str | None
    ) -> CompactionEntry | None:
        """``agent.compact`` with the agent's model; no run starts on the session meanwhile."""
        spec = self.agents[pick_agent(list(self.agents), agent)]
        async with self._lock:
            refuse_busy(session_id, await self.active(session_id), "reject")
            self._refuse_compacting(session_id)
            self._compacting.add(session_id)
        try:
            opened = await _open(self.store, spec, session_id, create=False)
            handle = await open_at(opened, leaf_id)
            entry = await handle.compact(keep_turns)
        finally:
            self._compacting.discard(session_id)
        self.listener.stored(session_id)
        return entry

    def _refuse_compacting(self, session_id: str) -> None:
        if session_id in self._compacting:
            raise RunActiveError(f"session {session_id!r} is being compacted")

    async def aclose(self) -> None:
        for runs in list(self._streams.values()):
            for stream in list(runs.values()):
                with contextlib.suppress(Exception):
                    await stream.cancel()


async def _open(store: Store, spec: AgentSpec, session_id: str, *, create: bool = True) -> Agent:
    """A handle on the session with the agent's model and options (``create``: as ``new``'s)."""
    opts = spec.options()
    return await new(
        model(spec.model),
        store=store,
        session_id=session_id,
        create=create,
        system_prompt=opts.system_prompt,
        tools=opts.tools,
        max_turns=opts.max_turns,
        model_options=opts.model_options,
        approval=opts.approval,
        approval_wait=opts.approval_wait,
    )


def _undelivered(task: asyncio.Task[object]) -> None:
    """A message the run accepted and could not deliver (it parked or was cancelled first)."""
    if not task.cancelled() and task.exception() is not None:
        logger.info("a message was not delivered: %s", task.exception())
