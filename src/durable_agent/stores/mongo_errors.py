"""How MongoStore turns driver errors into ``StoreUnavailableError`` with a one-line message."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WTimeoutError,
)

from ..session.errors import StoreUnavailableError

__all__ = ["translate_errors"]

#: Server error codes that mean "the server is going away or not reachable right now", not "your
#: request is wrong": shutdown, step-down, network and time-limit failures reported by the server.
_UNAVAILABLE_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        50,  # MaxTimeMSExpired
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)


def _is_unavailable(exc: PyMongoError) -> bool:
    """Whether ``exc`` means the backend is down or too slow, as opposed to a bad request.

    Covers server selection, connection and network errors (``ConnectionFailure`` and its
    subclasses ``AutoReconnect``, ``NetworkTimeout``, ``ServerSelectionTimeoutError``,
    ``WaitQueueTimeoutError``), server-side time limits, write-concern timeouts, client-side
    operation timeouts (``exc.timeout``) and shutdown/step-down codes.
    """
    if isinstance(exc, ConnectionFailure | ExecutionTimeout | WTimeoutError):
        return True
    if exc.timeout:
        return True
    return isinstance(exc, OperationFailure) and exc.code in _UNAVAILABLE_CODES


def _short_reason(exc: BaseException) -> str:
    """The first clause of a driver error, without pymongo's topology dump."""
    text = (str(exc).splitlines() or [type(exc).__name__])[0]
    for cut in (" (configured timeouts", ", Timeout:", ", Topology Description"):
        text = text.split(cut, 1)[0]
    if ": " in text and text.split(": ", 1)[0].count(":") == 1:  # drop a "host:port: " prefix
        text = text.split(": ", 1)[1]
    return text[:160] or type(exc).__name__


@contextlib.contextmanager
def translate_errors(what: str, address: Callable[[], str]) -> Iterator[None]:
    """Raise ``StoreUnavailableError`` (chained) for a backend that is down; pass the rest on.

    The message is one line, ``cannot reach MongoDB at host:port (reason) [what]``; ``what``
    names the object of the call, e.g. ``session 's1'``.
    """
    try:
        yield
    except PyMongoError as exc:
        if _is_unavailable(exc):
            raise StoreUnavailableError(
                f"cannot reach MongoDB at {address()} ({_short_reason(exc)}) [{what}]"
            ) from exc
        raise
    except OSError as exc:
        raise StoreUnavailableError(
            f"cannot reach MongoDB at {address()} ({_short_reason(exc)}) [{what}]"
        ) from exc
