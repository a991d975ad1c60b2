"""How a worker's log shows a failure: a store that is down is an outage the worker is built to
meet (its best-effort writes, such as clearing a reply's live deltas, log it and go on), so it
takes one line like any expected failure; a bug keeps its traceback."""

from __future__ import annotations

import io
import json
import logging

import pytest

from durable_agent.session.errors import StoreUnavailableError
from durable_agent.workflows.worker_logs import LogFormat, WorkerLogFormatter

errors = pytest.importorskip("pymongo.errors")


def _logged(exc: Exception, log_format: LogFormat) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(WorkerLogFormatter(log_format))
    logger = logging.getLogger(f"tests.worker_logs.{log_format}")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        try:
            raise exc
        except Exception:
            logger.warning("could not clear live deltas of s1/r1/000000001", exc_info=True)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def _outages() -> list[Exception]:
    closed = errors.AutoReconnect("127.0.0.1:27017: connection closed")
    down = StoreUnavailableError("cannot reach MongoDB at 127.0.0.1:27017 (connection refused)")
    down.__cause__ = closed
    selection = errors.ServerSelectionTimeoutError("127.0.0.1:27017: [Errno 111] refused")
    return [closed, down, selection]


@pytest.mark.parametrize("exc", _outages(), ids=lambda e: type(e).__name__)
def test_a_store_outage_is_one_line(exc: Exception) -> None:
    text = _logged(exc, "text")
    assert text.count("\n") == 1, text
    assert f"{type(exc).__name__}: " in text and "Traceback" not in text
    record = json.loads(_logged(exc, "json"))
    assert record["error_type"] == type(exc).__name__, record
    assert "traceback" not in record, record


def test_a_bug_keeps_its_traceback() -> None:
    text = _logged(RuntimeError("the adapter dropped its connection pool"), "text")
    assert "Traceback" in text and "RuntimeError" in text
    assert "traceback" in json.loads(_logged(RuntimeError("x"), "json"))
