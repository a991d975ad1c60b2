"""Errors of the durable agent. Each is an :class:`AgentError`; wrappers chain ``__cause__``."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentClosedError",
    "AgentError",
    "ApprovalNotPendingError",
    "ApprovalPendingError",
    "CompactError",
    "EntryNotFoundError",
    "EventGapError",
    "InvalidRunInputError",
    "NoFactoryError",
    "PayloadTooLargeError",
    "PersistError",
    "RunActiveError",
    "RunCancelledError",
    "RunNotAcceptingError",
    "UnknownAgentError",
]


class AgentError(Exception):
    """Base class of every durable-agent error."""

    def __reduce__(self) -> tuple[Any, ...]:
        # without ``__init__``, as a SessionError (session/errors.py says why)
        return (type(self).__new__, (type(self),), {**self.__dict__, "args": self.args})


class AgentClosedError(AgentError):
    """A mutating verb was called after ``close()``; reads still work."""


class RunActiveError(AgentError):
    """A run or compaction is active on this handle (the busy rule), or, for a run started
    ``if_unchanged``, another process stored on the session since the handle read it
    (:meth:`changed_meanwhile`)."""

    @classmethod
    def changed_meanwhile(cls, session_id: str) -> RunActiveError:
        return cls(
            f"another run or decision stored on session {session_id!r} after this run was "
            "started; nothing of this run was stored (start it again once the session is idle)"
        )


class NoFactoryError(AgentError):
    """The agent was opened with ``factory=None``: it records but never runs."""


class EntryNotFoundError(AgentError, LookupError):
    """``branch`` to an ID this handle does not hold as a stored entry."""


class PersistError(AgentError):
    """Storing a run's entries failed; nothing after the failure was emitted."""


class CompactError(AgentError):
    """The summarizer failed or produced no usable summary; nothing was stored."""


class RunCancelledError(AgentError):
    """The run was cancelled with ``stream.cancel()``; what the user saw is stored."""


class PayloadTooLargeError(AgentError):
    """A Temporal payload would exceed the configured limit; nothing was truncated."""


class UnknownAgentError(AgentError):
    """On Temporal: the run names an agent the worker does not have (the message lists those it
    has). Checked before the run writes anything, so the run created and stored nothing."""


class EventGapError(AgentError):
    """Events the stream had not received are no longer retained (the store is still complete)."""


class ApprovalPendingError(AgentError):
    """A run was started with new input while tool calls on the path wait for a person's
    decision: nothing was stored. Decide them first (``agent.decide``), or branch away."""


class ApprovalNotPendingError(AgentError):
    """A decision on a call that is not pending: never requested on this path, already
    answered, or already decided (then ``decision_id`` names the stored decision, the first
    one, which won)."""

    def __init__(self, message: str, *, tool_call_id: str = "", decision_id: str | None = None):
        super().__init__(message)
        self.tool_call_id = tool_call_id
        self.decision_id = decision_id


class RunNotAcceptingError(AgentError):
    """A message for a run that has ended, is ending or was cancelled, or that already holds
    the most queued messages it takes: start a new run with the message instead."""


class InvalidRunInputError(AgentError, ValueError):
    """A run's input that cannot start a run; ``field`` names what is wrong (``inputs[0].content``,
    ``options.max_turns``). Refused before the run stores anything (docs/design.md#errors)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid run input: {field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem
