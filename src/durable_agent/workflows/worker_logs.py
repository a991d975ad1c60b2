"""How a worker process logs: every line with its time (UTC) and level, as text or one JSON
object per line, and an expected failure in one line.

A worker meets failures it is built to meet: a run for an agent it does not serve, a leaf the
session lacks, a model attempt that fails and will be retried. Its activities raise each as a
Temporal ``ApplicationError`` whose type and message say everything (docs/design.md#errors), and
the SDK logs it with its traceback: a screen of the SDK's own frames for a client's typo. Here
such a record is one line, the error's type and message appended. So is a store that is down
(``StoreUnavailableError``, or PyMongo's connection failure reaching a best-effort write, such as
clearing a reply's live deltas): an outage the worker rides out, whose traceback is the driver's.
Any other exception is something no code raised on purpose (a bug), and keeps its traceback.

The Temporal core's own log (the SDK's native part: poll failures, a lost server) is forwarded to
the same handler, so that every line has the same shape. Call :func:`configure_worker_logging`
once, before the process makes its first Temporal client.

JSON records carry ``time``, ``level``, ``logger`` and ``message``; a record with an exception
adds ``error_type`` (the ``ApplicationError``'s type, else the exception's class) and ``error``,
plus ``traceback`` when the error is unexpected; an activity's record adds ``activity`` (the
SDK's details: type, attempt, workflow...). A text line names the activity in short instead:
``(durable_agent.call_model attempt 2, workflow durable-agent/s1/run/r1)``.

Every line is redacted of the process's keys (``ai/redaction.py``): an unexpected error's text
and traceback were sanitized by nobody.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
import warnings
from datetime import UTC, datetime
from typing import IO, Any, Literal

import temporalio.activity
from temporalio.exceptions import ApplicationError
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from ..ai.redaction import configured_secrets, redact
from ..session.errors import StoreUnavailableError

__all__ = [
    "LogFormat",
    "WorkerLogFormatter",
    "configure_worker_logging",
    "error_fields",
    "error_text",
    "in_one_line",
    "forward_core_log",
]

LogFormat = Literal["text", "json"]


def _outage(error: BaseException) -> bool:
    """A store that is down: ours, or PyMongo's (looked up, not imported: the extra may be
    missing, and then no such error exists)."""
    mongo = sys.modules.get("pymongo.errors")
    unreachable = () if mongo is None else (mongo.ConnectionFailure,)
    return isinstance(error, (StoreUnavailableError, *unreachable))


def in_one_line(error: BaseException) -> str:
    """``type: message``, the message's white space folded: how an outage is logged, one line
    an operator's search finds (no traceback: an outage is an ordinary event, not a bug)."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def error_fields(error: BaseException) -> dict[str, str]:
    """A logged exception as ``error_type`` and ``error``, plus ``traceback`` for a bug only:
    an ``ApplicationError`` was raised on purpose (its type says what), an outage is ridden
    out."""
    if isinstance(error, ApplicationError):
        return {"error_type": error.type or type(error).__name__, "error": error.message}
    if _outage(error):
        return {"error_type": type(error).__name__, "error": " ".join(str(error).split())}
    shown = "".join(traceback.format_exception(error)).rstrip()
    return {"error_type": type(error).__name__, "error": str(error), "traceback": shown}


def error_text(error: BaseException) -> str:
    """What a text line shows after its message: ``: type: message``, or for a bug its
    traceback on the lines after (which ends with them)."""
    fields = error_fields(error)
    if "traceback" in fields:
        return "\n" + fields["traceback"]
    return f": {fields['error_type']}: {fields['error']}"


def _time(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class WorkerLogFormatter(logging.Formatter):
    """One record per line (see the module docstring); only an unexpected error spans more."""

    def __init__(self, log_format: LogFormat = "text") -> None:
        super().__init__()
        self.log_format = log_format

    def format(self, record: logging.LogRecord) -> str:
        # an unexpected error's text and traceback were sanitized by nobody (a provider's own
        # exception may hold the request's headers): no line shows the process's keys
        return redact(self._format(record), configured_secrets(os.environ))

    def _format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        activity = getattr(record, "temporal_activity", None)
        if isinstance(activity, dict):
            if self.log_format == "json":
                fields["activity"] = activity
            else:
                fields["message"] += (
                    f" ({activity.get('activity_type')} attempt {activity.get('attempt')}, "
                    f"workflow {activity.get('workflow_id')})"
                )
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            fields.update(error_fields(error))
        if self.log_format == "json":
            return json.dumps(fields, ensure_ascii=False, default=str)
        line = f"{fields['time']} {fields['level']} {fields['logger']}: {fields['message']}"
        return line if error is None else line + error_text(error)


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    """A Python warning (the SDK's for an ``http://`` address...) as one log line, in the log's
    format: printed by :mod:`warnings` it was two lines of plain text among JSON objects."""
    del file, line
    where = f"{filename}:{lineno}"
    logging.getLogger("py.warnings").warning("%s: %s (%s)", category.__name__, message, where)


def configure_worker_logging(log_format: LogFormat = "text") -> None:
    """Send this process's log (and the Temporal core's) to stderr in ``log_format``, from INFO
    up, Python's warnings too. Replaces the root logger's handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(WorkerLogFormatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    warnings.showwarning = _log_warning
    # the formatter says which activity a record is about, in its own words
    temporalio.activity.logger.activity_info_on_message = False
    forward_core_log("WARN")


def forward_core_log(level: Literal["WARN", "ERROR"]) -> None:
    """Send the Temporal core's log from ``level`` up to the Python logger ``temporalio.core``
    (by default it writes its own lines, in terminal colours, to stderr). A worker keeps its
    warnings (its polls retried while Temporal is down); ``serve`` its errors only, as each of
    a request's calls retried is a warning there, and the server logs the request's outcome.
    Call it before the process makes its first Temporal client."""
    core = LogForwardingConfig(logger=logging.getLogger("temporalio.core"))
    telemetry = TelemetryConfig(
        logging=LoggingConfig(
            filter=TelemetryFilter(core_level=level, other_level="ERROR"), forwarding=core
        )
    )
    Runtime.set_default(Runtime(telemetry=telemetry), error_if_already_set=False)
