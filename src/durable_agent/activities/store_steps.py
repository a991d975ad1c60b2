"""The run's store steps on Temporal: the activities that open the session, load the run's path
and append entries, and the workflow-side calls that schedule them.

``ensure_session`` (only when the input names no leaf: create the session if absent, resolve its
newest entry) and ``load_path`` (check the agent and the leaf, answer the repairs the run stores
first and the agent's tools) run before the run writes anything; ``append_entries`` stores what
the run stamped. In a run they are local activities: on the worker holding the workflow task,
inside that task, each recorded as one marker, so a run's start and its input commit cost no
server round trip (docs/design.md#temporal). A worker lost inside one is noticed by the workflow
task timeout instead of a heartbeat, which is why model and tool calls stay ordinary activities.
A local activity's input is not in the history, so a run that fails after a local append raised
names the entries it may have stored in its failure, for the client to reconcile
(docs/design.md#repair-and-reconcile).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

from ..durable.errors import ApprovalPendingError, InvalidRunInputError, RunActiveError
from ..durable.inputs import NOTHING_TO_ANSWER
from ..durable.limits import TEMPORAL_BLOB_LIMIT, check_payload
from ..durable.persist import Stamped
from ..session.approvals import awaiting_turn, run_start_repairs
from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry, MessageEntry
from ..session.errors import EntryConflictError, SessionError, SessionNotFoundError
from ..session.store import GuardedStore, created_at_of, open_session
from .base import ActivityBase, heartbeating
from .contracts import (
    AppendInput,
    AppendResult,
    EnsureSessionInput,
    LoadPathInput,
    PathInfo,
    StoredTimes,
    Timeouts,
    ToolInfo,
)
from .failures import application_error, checked_payload, is_cancellation, run_failure
from .run_contracts import RunInput
from .start_leaf import input_id, newest_before, recorded_start_leaf

__all__ = [
    "STORE_NON_RETRYABLE",
    "StoreSteps",
    "append",
    "local_step",
    "new_entry_id",
    "open_path",
    "reset_of_execution",
    "store_retry",
    "store_summary",
]

CARRY_LIMIT = TEMPORAL_BLOB_LIMIT - 65_536
"""The largest ``load_path`` answer: under Temporal's limit with room for the marker it is
recorded in."""

STORE_NON_RETRYABLE = [
    "SessionNotFoundError",
    "SessionExistsError",
    "InvalidSessionIdError",
    "EntryConflictError",
    "EntryDecodeError",
    "CorruptSessionError",
    "EntryTooLargeError",
    "ValueError",
]


class StoreSteps(ActivityBase):
    """``ensure_session``, ``load_path`` and ``append_entries``."""

    @activity.defn(name="durable_agent.ensure_session")
    async def ensure_session(self, inp: EnsureSessionInput) -> str:
        """Create the session if absent; return its last appended entry ID (``""`` if empty).
        An unknown agent fails first, so it creates nothing."""
        self.agent_spec(inp.agent)
        session_id = inp.session_id
        try:
            async with heartbeating():
                if inp.inputless:
                    entries = await self._conversation(session_id)
                else:
                    entries = await open_session(self.store, session_id)
        except SessionError as exc:
            raise application_error(exc) from exc
        workflow_id = activity.info().workflow_id
        if inp.reset_of and workflow_id:
            # a reset retries the run from where it started, not from the newest entry now
            leaf = await recorded_start_leaf(workflow_id, inp.reset_of)
            if leaf is not None and (leaf == "" or any(e.id == leaf for e in entries)):
                return leaf
        return newest_before(entries, set(inp.own_ids))

    async def _conversation(self, session_id: str) -> list[Entry]:
        """The entries of a session a run without input answers; absent or empty, the run's
        input is invalid (it would call the model with nothing)."""
        try:
            entries = await self.store.load_entries(session_id)
        except SessionNotFoundError:
            entries = []
        if not entries:
            problem = InvalidRunInputError("inputs", NOTHING_TO_ANSWER)
            raise ApplicationError(str(problem), type="InvalidRunInput", non_retryable=True)
        return entries

    @activity.defn(name="durable_agent.load_path")
    async def load_path(self, inp: LoadPathInput) -> PathInfo:
        """Check the agent and the leaf before the run writes anything (then create the session
        if asked and absent); return the repairs."""
        spec = self.agent_spec(inp.agent)
        if inp.create_session:
            try:
                async with heartbeating():
                    await open_session(self.store, inp.session_id)
            except SessionError as exc:
                raise application_error(exc) from exc
        async with heartbeating():
            # confirmed: a session deleted and created again elsewhere is not what this worker
            # remembers of it (docs/design.md#worker-memory)
            p = await self.path_to(inp.session_id, inp.leaf_id, confirm=True)
        repairs = run_start_repairs(p)
        waiting = awaiting_turn(p)
        tail = [] if waiting is None else [encode_entry(e) for e in p[waiting.index :]]
        tools = [
            ToolInfo(
                name=t.name,
                parallel_safe=t.parallel_safe,
                max_attempts=t.retry.max_attempts,
                initial_interval=t.retry.initial_interval,
                backoff=t.retry.backoff,
                max_interval=t.retry.max_interval,
                non_retryable=list(t.retry.non_retryable),
                timeout=t.timeout,
            )
            for t in spec.tools
        ]
        born = await created_at_of(self.store, inp.session_id) if inp.creation else None
        info = PathInfo(
            repairs=[e.message for e in repairs],
            tools=tools,
            max_turns=spec.max_turns,
            reset_of=inp.reset_of,
            waiting=tail,
            approval_wait=spec.approval_wait,
            created_at=None if born is None else born.isoformat(),
        )
        if tail:
            # each entry fits the payload limit, the decided turn as a whole need not (a reply
            # near it and a long denial; an in-process run's reply over it): refused now, not
            # a workflow task retried until the run times out (docs/design.md#bounded-history)
            what = f"the decided turn at leaf {inp.leaf_id!r} (its reply and what follows it)"
            checked_payload(what, info.model_dump_json(), CARRY_LIMIT)
        return info

    @activity.defn(name="durable_agent.append_entries")
    async def append_entries(self, inp: AppendInput) -> AppendResult:
        """Store entries the run stamped; retry-safe because appends are idempotent by ID.
        Returns the stored times (see :class:`AppendResult`)."""
        entries = [decode_entry(w) for w in inp.entries]
        try:
            async with heartbeating():
                try:
                    await self._append(inp.session_id, entries, inp.if_last)
                except EntryConflictError:
                    entries = await self._adopt_earlier_stamps(inp, entries)
        except SessionError as exc:
            raise application_error(exc) from exc
        return AppendResult(times=[StoredTimes.of(e) for e in entries])

    async def _append(self, session_id: str, entries: list[Entry], if_last: str | None) -> None:
        """``append_entries``, or guarded by ``if_last`` (a run started ``if_unchanged``)."""
        if if_last is None or not isinstance(self.store, GuardedStore):
            return await self.store.append_entries(session_id, entries)
        if not await self.store.append_if_last(session_id, entries, if_last or None):
            error = RunActiveError.changed_meanwhile(session_id)
            raise ApplicationError(str(error), type="RunActiveError", non_retryable=True)

    async def _adopt_earlier_stamps(self, inp: AppendInput, entries: list[Entry]) -> list[Entry]:
        """Settle a conflict that is only the clock: ``entries`` as the store holds them.

        A run's input and repairs are committed by a local activity inside a workflow task. If
        the worker dies after that write but before the task completes, another worker runs the
        task again: the same entry IDs (the run's random source is seeded once) but another
        ``workflow.now()``, so the same entries come with other ``created_at`` (and message
        timestamps the run stamped). The stored ones win, as for a producer's commit: the
        result names their times, which the run adopts (``AppendResult``). Entries not
        stored yet are appended; any other difference is a real conflict and raises.
        """
        session_id = inp.session_id
        stored = {e.id: e for e in await self.store.load_entries(session_id)}
        settled: list[Entry] = []
        missing: list[Entry] = []
        for entry in entries:
            earlier = stored.get(entry.id)
            if earlier is None:
                missing.append(entry)
                settled.append(entry)
                continue
            same = StoredTimes.of(earlier).on(entry)
            if encode_entry(same) != encode_entry(earlier):
                raise EntryConflictError(session_id, entry.id)
            settled.append(earlier)
        if missing:  # after those stored already (a guarded batch: they passed its guard)
            landed = [e.id for e in settled if e.id in stored]
            guard = inp.if_last if inp.if_last is None or not landed else landed[-1]
            await self._append(session_id, missing, guard)
        return settled


# -- workflow side ---------------------------------------------------------------------------


def new_entry_id() -> str:
    """An entry ID inside a workflow: from ``workflow.random()``, so replay reproduces it."""
    return f"{workflow.random().getrandbits(64):016x}"


def store_retry(t: Timeouts) -> RetryPolicy:
    """Store steps retry only while the store is unavailable."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=t.retry_initial),
        maximum_interval=timedelta(seconds=t.retry_max),
        maximum_attempts=t.store_max_attempts,
        non_retryable_error_types=STORE_NON_RETRYABLE,
    )


async def local_step(step: Any, arg: Any, t: Timeouts, summary: str) -> Any:
    """Run a store step as a local activity; its failure reaches the caller as an
    ``ActivityError``, the shape an ordinary activity's has (a local one's arrives as its bare
    cause: the ``ApplicationError`` it raised, a timeout, a cancellation)."""
    try:
        return await workflow.execute_local_activity_method(
            step,
            arg,
            start_to_close_timeout=timedelta(seconds=t.store_start_to_close),
            retry_policy=store_retry(t),
            summary=summary,
        )
    except ActivityError:
        raise
    except FailureError as exc:
        raise ActivityError(
            f"local activity failed: {summary}",
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type="",
            activity_id="",
            retry_state=None,
        ) from exc


async def open_path(inp: RunInput, *, creation: bool = False) -> tuple[str, PathInfo]:
    """The run's starting leaf (the session's newest entry when the input names none, the
    session created if absent, as ``load_path`` does for ``create_session``) and what
    ``load_path`` found there: repairs, tools, and (``creation``) the session's ``created_at``.
    A failure fails the run before it stores anything."""
    t, leaf, reset_of = inp.timeouts, inp.leaf_id, reset_of_execution()
    try:
        if leaf is None:
            start = EnsureSessionInput(
                session_id=inp.session_id,
                agent=inp.agent,
                reset_of=reset_of,
                inputless=not inp.inputs,
                own_ids=first_batch_ids(inp),
            )
            leaf = await local_step(StoreSteps.ensure_session, start, t, "ensure session")
        at = LoadPathInput(
            session_id=inp.session_id,
            leaf_id=leaf,
            agent=inp.agent,
            reset_of=reset_of,
            create_session=inp.leaf_id is not None and inp.create_session,
            creation=creation,
        )
        info: PathInfo = await local_step(StoreSteps.load_path, at, t, "load path")
    except ActivityError as exc:
        if is_cancellation(exc):
            raise CancelledError("run cancelled") from exc
        raise run_failure(exc) from exc
    if info.waiting and inp.inputs and not inp.resumed:
        # as ``agent.run(...)`` refuses: input between a request and its decision would put
        # the calls' results after it (an operator's start names no leaf, so nothing checked)
        raise application_error(
            ApprovalPendingError(
                f"tool calls at leaf {leaf!r} of session {inp.session_id!r} wait for a "
                "decision: decide them and start the run with no input, or give a leaf_id"
            )
        )
    return leaf, info


FIRST_DRAWS = 64
"""Entry IDs of the run's random source an ``ensure_session`` input names (its first batch's
repairs and operator messages draw from there; a local activity's input is not in history)."""


def first_batch_ids(inp: RunInput) -> list[str]:
    """The IDs the run's first batch can be stored under: its inputs' own IDs, and the first
    :data:`FIRST_DRAWS` IDs of the run's random source, drawn ahead and put back (the state is
    restored, so the run draws them again, in a first task as in a re-run)."""
    ids = [i for i in (input_id(item) for item in inp.inputs) if i]
    source = workflow.random()
    state = source.getstate()
    ids += [new_entry_id() for _ in range(FIRST_DRAWS)]
    source.setstate(state)
    return ids


def reset_of_execution() -> str | None:
    """The original run when this execution is an operator's reset of it, else ``None``.

    A reset execution keeps the original's start event, so its ``original_execution_run_id``
    names another run; a continue-as-new execution carries its leaf and never asks. The answer
    only feeds activity arguments, so replay stays deterministic whatever it is (a replayer
    given the history alone sees the original's run ID as its own: workflow code decides
    nothing on it, see activities.reset_steps)."""
    info = workflow.info()
    if info.continued_run_id is not None or info.run_id == info.original_execution_run_id:
        return None
    return info.original_execution_run_id


async def append(
    session_id: str,
    stamped: Stamped,
    t: Timeouts,
    *,
    local: bool,
    summary: str | None = None,
    if_last: str | None = None,
) -> Stamped:
    """Store ``stamped.durable`` with one ``append_entries`` (``local``: a local activity) and
    return the batch as stored (see :class:`AppendResult`); an entry over the payload limit
    raises ``PayloadTooLargeError`` before anything is scheduled. ``summary`` shows in the
    Temporal UI (by default :func:`store_summary`); ``if_last``: see :class:`AppendInput`."""
    wires = [encode_entry(e) for e in stamped.durable]
    for wire in wires:
        check_payload(wire, "entry")
    inp = AppendInput(session_id=session_id, entries=wires, if_last=if_last)
    summary = summary or store_summary(stamped.durable)
    if local:
        result: AppendResult = await local_step(StoreSteps.append_entries, inp, t, summary)
    else:
        result = await workflow.execute_activity_method(
            StoreSteps.append_entries,
            inp,
            start_to_close_timeout=timedelta(seconds=t.store_start_to_close),
            heartbeat_timeout=timedelta(seconds=t.store_heartbeat),
            retry_policy=store_retry(t),
            summary=summary,
        )
    fixed = {}
    durable = list(stamped.durable)
    for i, (entry, times) in enumerate(zip(durable, result.times, strict=True)):
        stored = times.on(entry)
        if stored is not entry:
            durable[i] = fixed[entry.id] = stored
    if not fixed:
        return stamped
    copies = [fixed.get(c.id, c) for c in stamped.copies]
    return Stamped(copies=copies, durable=durable, leaf_id=stamped.leaf_id)


def store_summary(entries: list[Entry]) -> str:
    """What an ``append_entries`` activity stores, in words (its summary in the Temporal UI)."""
    messages = [e.message for e in entries if isinstance(e, MessageEntry)]
    repairs = sum(1 for e in entries if isinstance(e, MessageEntry) and e.synthetic)
    rest = len(entries) - repairs
    parts = []
    if repairs:
        parts.append(f"repair ({repairs} call{'' if repairs == 1 else 's'})")
    if rest:
        results = [m for m in messages if m.role == "tool_result"]
        if messages and len(results) == rest and all(m.is_error for m in results):
            cancelled = all(m.text() == "tool execution cancelled" for m in results)
            parts.append("cancellation results" if cancelled else "tool failure results")
        elif len(messages) == rest and all(m.role == "assistant" for m in messages):
            parts.append("model reply")
        elif messages and len(results) == rest:
            parts.append("tool results")
        else:
            parts.append("input")
    return "store " + " + ".join(parts)
