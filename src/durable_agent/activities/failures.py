"""Temporal error translation, written once (docs/design.md#errors).

An error crosses three hops on its way from a worker to the caller, and each hop is one function
here, so the type name, the message and a model error's ``retryable`` flag survive all three the
same way:

1. activity -> Temporal: :func:`application_error` wraps the exception as an ``ApplicationError``
   carrying its type name (which decides Temporal's retries), its message redacted of the worker's
   secrets, and for a :class:`ModelError` its ``retryable`` flag as the first detail;
2. activity failure -> workflow: :func:`activity_failure` reads (type name, message) back,
   :func:`model_error` rebuilds a model error, :func:`is_cancellation` tells a cancellation from a
   failure, and :func:`run_failure` makes the run's own failure (never retried);
3. workflow failure -> client: :func:`agent_error` turns that ``ApplicationError`` back into the
   library's typed error, as the in-process executor would have raised it.

The workflow imports this module too (through the sandbox's pass-through), so nothing here may
depend on the activity context.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from ..ai.messages import encodable_text
from ..ai.model import ModelError
from ..ai.redaction import configured_secrets, redact
from ..durable import errors as agent_errors
from ..durable.errors import AgentError, PayloadTooLargeError
from ..durable.limits import check_payload
from ..session.errors import StoreUnavailableError

__all__ = [
    "PAYLOAD_TOO_LARGE",
    "UNSETTLED",
    "ActivityFailure",
    "activity_failure",
    "agent_error",
    "application_error",
    "checked_payload",
    "is_cancellation",
    "model_error",
    "payload_too_large",
    "run_failure",
    "unsettled_ids",
]

PAYLOAD_TOO_LARGE = PayloadTooLargeError.__name__


def application_error(
    exc: BaseException,
    *,
    non_retryable: bool | None = None,
    max_delay: timedelta | None = None,
) -> ApplicationError:
    """Wrap ``exc`` for Temporal, keeping its type name; secrets never appear because only the
    message (sanitized by providers, then redacted of the worker environment's keys) is kept.

    A model error's ``retry_after`` becomes the next retry's delay, at most ``max_delay`` (the
    retry policy's maximum interval): Temporal lets that delay exceed the policy's bound, so a
    provider asking for an hour would otherwise park the run for one (or fail it at once when
    its timeout is nearer), where in process ``RetryingModel`` waits at most that interval."""
    retryable = isinstance(exc, StoreUnavailableError) or (
        isinstance(exc, ModelError) and exc.retryable
    )
    details: list[Any] = []
    next_delay: timedelta | None = None
    if isinstance(exc, ModelError):
        details = [exc.retryable]
        if exc.retry_after:
            seconds = exc.retry_after
            if max_delay is not None:
                seconds = min(seconds, max_delay.total_seconds())
            next_delay = timedelta(seconds=seconds)
    return ApplicationError(
        redact(encodable_text(str(exc)), configured_secrets(os.environ)),
        *details,
        type=type(exc).__name__,
        non_retryable=(not retryable) if non_retryable is None else non_retryable,
        next_retry_delay=next_delay,
    )


def checked_payload(what: str, payload: str, limit: int) -> None:
    """The payload limit inside an activity: over it, a non-retryable ``PayloadTooLargeError``
    (another attempt would produce the same bytes)."""
    try:
        check_payload(payload, what, limit)
    except PayloadTooLargeError as exc:
        raise application_error(exc, non_retryable=True) from None


def is_cancellation(exc: BaseException) -> bool:
    """``exc`` is the run's (or an activity's) cancellation, not a failure."""
    if isinstance(exc, (asyncio.CancelledError, CancelledError)):
        return True
    return isinstance(exc, ActivityError) and isinstance(exc.cause, CancelledError)


def activity_failure(exc: ActivityError) -> tuple[str, str]:
    """An activity's failure as (type name, message): the ``ApplicationError`` it raised, or
    the Temporal error that ended it (a timeout, say)."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    if cause is not None:
        return type(cause).__name__, str(cause)
    return type(exc).__name__, str(exc)


def model_error(cause: BaseException | None, message: str) -> ModelError:
    """The :class:`ModelError` an ``ApplicationError`` of that type carries (its first detail is
    ``retryable``, see :func:`application_error`)."""
    details = cause.details if isinstance(cause, ApplicationError) else ()
    retryable = bool(details[0]) if details else False
    return ModelError(message, retryable=retryable)


class ActivityFailure(Exception):
    """An activity's failure as its own error (type name and message), so a store error reads
    ``persist message: <the store's message>`` exactly as in-process."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def payload_too_large(exc: BaseException | None) -> str | None:
    """The message of a PayloadTooLargeError anywhere in ``exc``'s cause chain."""
    while exc is not None:
        if isinstance(exc, PayloadTooLargeError):
            return str(exc)
        if isinstance(exc, ActivityFailure) and exc.kind == PAYLOAD_TOO_LARGE:
            return str(exc)
        if isinstance(exc, ActivityError):
            kind, message = activity_failure(exc)
            if kind == PAYLOAD_TOO_LARGE:
                return message
        exc = exc.__cause__
    return None


UNSETTLED = "unsettled"
"""The key of a run failure's detail naming entries it may have stored (see :func:`run_failure`)."""


def run_failure(exc: BaseException, unsettled: Sequence[str] = ()) -> ApplicationError:
    """The run's failure as the client will re-raise it (type name kept, never retried).

    ``unsettled``: entry IDs of writes the run is unsure of (a local append that failed may
    have applied: its input, unlike an ordinary activity's, is not in the history), carried as
    a last ``{"unsettled": [...]}`` detail for the client to reconcile
    (docs/design.md#repair-and-reconcile)."""
    extra: list[Any] = [{UNSETTLED: list(unsettled)}] if unsettled else []
    too_large = payload_too_large(exc)
    if too_large is not None:
        return ApplicationError(too_large, *extra, type=PAYLOAD_TOO_LARGE, non_retryable=True)
    if isinstance(exc, ModelError):
        return ApplicationError(
            str(exc), exc.retryable, *extra, type="ModelError", non_retryable=True
        )
    if isinstance(exc, ActivityError):
        kind, message = activity_failure(exc)
        return ApplicationError(message, *extra, type=kind, non_retryable=True)
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, AgentError):
        return ApplicationError(str(exc), *extra, type=type(exc).__name__, non_retryable=True)
    return ApplicationError(
        f"{type(exc).__name__}: {exc}", *extra, type=type(exc).__name__, non_retryable=True
    )


def unsettled_ids(failure: BaseException | None) -> list[str]:
    """The entry IDs a run failure's ``unsettled`` detail names (``[]`` if none)."""
    if not isinstance(failure, ApplicationError):
        return []
    for detail in failure.details:
        if isinstance(detail, dict) and isinstance(detail.get(UNSETTLED), list):
            return [str(i) for i in detail[UNSETTLED]]
    return []


def agent_error(cause: ApplicationError) -> BaseException:
    """A run's ``ApplicationError`` as the library's own error: a :class:`ModelError` keeps its
    ``retryable`` flag, an :class:`AgentError` subclass its type, anything else reads
    ``<type>: <message>``. A store outage among the failure's causes (a write that failed
    until its retries ran out) is its ``__cause__``, as in process, so a caller, and a server
    telling its client, sees the store was down, not a ``PersistError`` alone."""
    error = _agent_error(cause)
    error.__cause__ = _store_outage(cause)
    return error


def _store_outage(failure: BaseException | None) -> StoreUnavailableError | None:
    """The worker's ``StoreUnavailableError`` a Temporal failure carries in its causes."""
    while failure is not None:
        if isinstance(failure, ApplicationError) and failure.type == "StoreUnavailableError":
            return StoreUnavailableError(failure.message)
        failure = failure.__cause__
    return None


def _agent_error(cause: ApplicationError) -> BaseException:
    kind, message = cause.type or "", cause.message
    if kind == "ModelError":
        return model_error(cause, message)
    cls = getattr(agent_errors, kind, None)
    if cls is agent_errors.InvalidRunInputError:
        error = agent_errors.InvalidRunInputError("", message)  # the message names the field
        error.field = str(cause.details[0]) if cause.details else ""
        return error
    if isinstance(cls, type) and issubclass(cls, AgentError):
        return cls(message)
    return AgentError(f"{kind}: {message}" if kind else message)
