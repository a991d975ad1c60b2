"""What the server asks of the runs of a session (:class:`Runs`), and the rules both kinds share.

``LocalRuns`` (:mod:`.local_runs`) runs agents in the server process (``create_app(agents=...)``,
for development: its runs live and die with the process); ``TemporalRuns``
(:mod:`.temporal_runs`) starts run workflows on the workers of a task queue, and any replica
finds any run (docs/design.md#http-api).

Both tell a :class:`RunListener` (the session streams) what the server learns of a run: its
status, and for a run in this process its live text; a Temporal run's text is read from the
store's live-delta channel by the stream itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel

from ..ai.redaction import configured_secrets, redact
from ..durable.agent import Agent
from ..durable.errors import AgentError, RunActiveError, RunNotAcceptingError, UnknownAgentError
from ..durable.inbox import When
from ..session.approvals import ApprovalDecision
from ..session.entries import CompactionEntry, Entry, MessageEntry
from ..session.errors import SessionExistsError, SessionNotFoundError, StoreUnavailableError
from ..session.store import RetentionStore, Store

__all__ = [
    "FAILURE_CHARS",
    "REMEMBERED",
    "Accepted",
    "OnBusy",
    "RunEnd",
    "RunFailure",
    "RunListener",
    "RunNotFoundError",
    "Runs",
    "RunsUnavailableError",
    "STORE_UNAVAILABLE",
    "Status",
    "cancel_each",
    "drop_made",
    "made_for_start",
    "no_run_accepts",
    "open_at",
    "pick_agent",
    "refuse_busy",
    "run_active",
]

logger = logging.getLogger("durable_agent.server")

OnBusy = Literal["reject", "next_turn", "at_end", "sibling"]
Status = Literal["started", "awaiting_approval", "completed", "failed", "cancelled"]


REMEMBERED = 10_000
"""How many ended runs a process remembers the outcome of (the oldest forgotten first)."""


class Accepted:
    """The runs that accepted the messages this process handed on, by (session, message ID),
    with the session's ``created_at`` then: the same message sent again (a retried request) is
    answered with its run, not handed again, for the last ``REMEMBERED`` messages; in a session
    created again under the ID since (another process deleted it), the ID names nothing
    (docs/design.md#retention)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], tuple[str, datetime | None]] = {}

    def run_of(
        self, session_id: str, message_id: str | None, born: datetime | None = None
    ) -> str | None:
        """The run that took ``message_id`` in the session created at ``born``, if any."""
        if message_id is None:
            return None
        took = self._runs.get((session_id, message_id))
        return took[0] if took is not None and took[1] == born else None

    def add(
        self, session_id: str, message_id: str, run_id: str, born: datetime | None = None
    ) -> None:
        self._runs[(session_id, message_id)] = (run_id, born)
        while len(self._runs) > REMEMBERED:
            del self._runs[next(iter(self._runs))]

    def forget(self, session_id: str) -> None:
        """The session was deleted: its message IDs name nothing any more."""
        for key in [k for k in self._runs if k[0] == session_id]:
            del self._runs[key]


FAILURE_CHARS = 2000
"""The most characters of a failed run's message a status or a stream frame carries."""


STORE_UNAVAILABLE = "the session store is unavailable; try again in a moment"
"""What a client is told of a store's outage: its errors name a path, a host and port, which are
the server's business (the client may be another company's front-end)."""


class RunFailure(BaseModel):
    """Why a run failed, as a front-end shows it: the error a caller of the library would have
    caught (its class name, e.g. ``UnknownAgentError``, ``ModelError``) and its message."""

    type: str
    message: str

    @classmethod
    def of(cls, exc: BaseException) -> RunFailure:
        """``exc`` without the keys this process holds (a worker's failures carry none), its
        message cut to ``FAILURE_CHARS`` (a provider's error can quote a whole response); a
        store's outage as a 503 tells it, naming no path or host (a worker's comes as
        ``AgentError`` ``StoreUnavailableError: ...``; an in-process run's write as the
        ``PersistError`` it caused, quoting it)."""
        down = StoreUnavailableError.__name__
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, StoreUnavailableError):
            cause = cause.__cause__
        if cause is not None or str(exc).startswith(f"{down}: "):
            return cls(type=down, message=STORE_UNAVAILABLE)
        message = redact(str(exc), configured_secrets(os.environ))
        if len(message) > FAILURE_CHARS:
            message = message[: FAILURE_CHARS - 1] + "…"
        return cls(type=type(exc).__name__, message=message)


RunEnd = tuple[Status, str, RunFailure | None]
"""How a run ended, the ID of its last stored entry (``""``: none, or not known) and, for a
failed run, why."""


class RunNotFoundError(AgentError, LookupError):
    """No run of that ID in that session (or not one this server can see)."""


class RunsUnavailableError(AgentError):
    """The server has neither agents in process nor a Temporal connection: it only reads."""


def run_active(session_id: str, run_id: str) -> RunActiveError:
    """The 409 of a busy session, naming the active run."""
    error = RunActiveError(f"session {session_id!r} has an active run {run_id!r}")
    error.run_id = run_id  # type: ignore[attr-defined]
    return error


class RunListener(Protocol):
    """What the session streams hear from the runs of this process."""

    def run_status(
        self,
        session_id: str,
        run_id: str,
        status: Status,
        last_entry: str = "",
        failure: RunFailure | None = None,
    ) -> None:
        """The run's status changed; for an end, ``last_entry`` is the ID of the last entry
        the run stored (``""``: none, or not known), which the streams show before the end,
        and a failed run's ``failure`` says why."""

    def run_delta(
        self,
        session_id: str,
        run_id: str,
        entry_parent: str,
        text: str,
        restart: bool,
        stored: str = "",
    ) -> None:
        """Live text of the run's reply under ``entry_parent``; ``stored``: the ID of that
        reply's entry, when the run stored it already (text the streams then never show after
        the entry)."""

    def stored(self, session_id: str, entry_ids: Sequence[str] = (), run_id: str = "") -> None:
        """Entries were stored (these, by run ``run_id``, as far as it knows): read them."""

    def watched(self, session_id: str) -> bool:
        """Whether streams follow the session (its runs' live text is wanted)."""
        ...

    def deleted(self, session_id: str) -> list[str]:
        """The session was deleted: nothing of its runs reaches its streams any more (nor
        those of a session created again under its ID); the runs of it the streams heard of."""
        ...


class Runs(Protocol):
    """Where a server's runs go."""

    local: bool
    """Runs in this process (their live text comes from :class:`RunListener` calls)."""

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
        """Start a run (ID ``run_id``, else a new one) and answer its ID; a ``run_id`` the
        session has a run of already starts nothing (a retried request)."""
        ...

    async def has(self, session_id: str, run_id: str) -> bool:
        """Whether the session has a run of that ID, going or ended."""
        ...

    def agent(self, name: str | None) -> str:
        """The agent a run started with ``agent`` = ``name`` goes to, else
        :class:`UnknownAgentError` (as :meth:`start` raises it, before anything is stored)."""
        ...

    async def cancel(self, session_id: str, run_id: str) -> None: ...

    async def session_deleted(self, session_id: str, run_ids: Sequence[str]) -> None:
        """The session was deleted from the store: stop its runs (``run_ids``, those the
        streams relayed, and those this finds), which would otherwise go on calling the model
        until their next commit failed, and forget what is kept of them elsewhere."""
        ...

    async def active(self, session_id: str) -> list[str]:
        """The IDs of the session's runs still going."""
        ...

    async def status(self, session_id: str, run_id: str) -> Status: ...

    async def failure(self, session_id: str, run_id: str) -> RunFailure | None:
        """Why a run whose status is ``failed`` failed (``None`` when that cannot be had)."""
        ...

    def relayed(self, session_id: str, run_id: str) -> Status | None:
        """The status of a run this process relays to the streams (:class:`~.relay.RunRelay`:
        one it started), else ``None``."""
        ...

    async def send(
        self, session_id: str, entry: MessageEntry, when: When, message_id: str | None = None
    ) -> tuple[str, str]:
        """Hand ``entry`` to the session's running run: ``(run_id, message_id)`` once a run
        accepted it, else :class:`RunNotAcceptingError`. A ``message_id`` a run of the session
        accepted already is not handed again (a retried request)."""
        ...

    async def decide(self, session_id: str, decision: ApprovalDecision) -> tuple[Entry, str | None]:
        """Decide a pending call of the session; the stored decision entry, and the run
        started to carry out the turn it settled (:func:`continue_settled`), if one was."""
        ...

    async def compact(
        self, session_id: str, keep_turns: int, *, leaf_id: str | None, agent: str | None
    ) -> CompactionEntry | None:
        """Compact the session's path (to its last entry, or ``leaf_id``) with ``agent``'s
        model; the stored entry, ``None`` when there was nothing to compact.
        :class:`RunActiveError` while a run goes."""
        ...


def no_run_accepts(session_id: str) -> RunNotAcceptingError:
    return RunNotAcceptingError(
        f"no run of session {session_id!r} takes a message now: start a run with it"
    )


def pick_agent(names: Sequence[str], agent: str | None) -> str:
    if agent is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise UnknownAgentError(
                'name the agent ("agent"): this server has no default one (durable-agent serve '
                "--agent NAME, create_app(agents=[NAME]))"
            )
        raise UnknownAgentError("name the agent: this server has " + ", ".join(names))
    if names and agent not in names:
        raise UnknownAgentError(f"no agent {agent!r} on this server (it runs {', '.join(names)})")
    return agent


async def open_at(agent: Agent, leaf_id: str | None) -> Agent:
    if leaf_id is not None and leaf_id != agent.leaf_id:
        await agent.branch(leaf_id)
    return agent


async def cancel_each(runs: Runs, session_id: str, run_ids: Iterable[str]) -> None:
    """Cancel each run of a deleted session, best effort (a run whose cancel fails fails at
    its next commit)."""
    for run_id in sorted(set(run_ids)):
        try:
            await runs.cancel(session_id, run_id)
        except Exception as exc:
            logger.info("cancelling run %s of deleted %s: %s", run_id, session_id, exc)


@contextlib.asynccontextmanager
async def made_for_start(store: Store, session_id: str) -> AsyncIterator[None]:
    """The session of a run starts to exist with the run's request (a stream may follow it at
    once): created if absent. A start refused after that (the store or Temporal failing before
    the run exists) deletes the session it created, while it is still empty: a refused request
    stores nothing (docs/design.md#http-api)."""
    try:
        await store.create_session(session_id)
        made = True
    except SessionExistsError:
        made = False
    try:
        yield
    except BaseException:
        if made:
            await drop_made(store, session_id, "start", only_empty=True)
        raise


async def drop_made(store: Store, session_id: str, by: str, *, only_empty: bool) -> None:
    """Delete the session a refused request (``by``: which) created, best effort: only while
    it is empty (``only_empty``: a run may have begun storing into it), else whatever it
    holds (a fork's child under an ID the client was never told). A store still down keeps
    it, logged in one line; one never created is no matter."""
    if not isinstance(store, RetentionStore):
        return
    try:
        if not only_empty or not await store.load_entries(session_id):
            await store.delete_session(session_id)
    except SessionNotFoundError:
        pass
    except Exception as exc:
        logger.warning("removing session %s a refused %s made: %s", session_id, by, exc)


def refuse_busy(session_id: str, active: list[str], on_busy: OnBusy) -> None:
    """``sibling`` runs beside the active run; anything else is refused while one goes (the
    run routes deliver ``next_turn``/``at_end`` into the active run before they get here)."""
    if active and on_busy != "sibling":
        raise run_active(session_id, active[0])
