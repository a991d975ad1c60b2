"""The execution timeout of the workflows the library starts, and how to change it.

A run workflow with no execution timeout can sit forever on a worker that never comes back (or a
model that never answers within its retries): Temporal then keeps it open and its session busy
for any client attached to it. Runs and compactions started by :class:`TemporalExecutor` (and so
by every CLI command) get ``DEFAULT_EXECUTION_TIMEOUT`` (24 hours) unless the executor is given
``execution_timeout=`` (``None`` for none) or the client's environment sets
``DURABLE_AGENT_RUN_TIMEOUT`` (``90s``, ``30m``, ``24h``, ``7d``, plain seconds, or ``none``).
A timed-out run is a hard termination (docs/design.md#cancellation): the next run repairs what
it left.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta

__all__ = ["DEFAULT_EXECUTION_TIMEOUT", "ENV_RUN_TIMEOUT", "parse_timeout", "run_timeout_from_env"]

DEFAULT_EXECUTION_TIMEOUT = timedelta(hours=24)
ENV_RUN_TIMEOUT = "DURABLE_AGENT_RUN_TIMEOUT"

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_FORMAT = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")


def parse_timeout(value: str) -> timedelta | None:
    """``"30m"`` -> 30 minutes; ``"none"``, ``"off"`` or ``"0"`` -> no timeout."""
    text = value.strip().lower()
    if text in {"none", "off"}:
        return None
    match = _FORMAT.fullmatch(text)
    if match is None:
        raise ValueError(
            f"invalid timeout {value!r}: use seconds or a number with s, m, h or d "
            "(e.g. 90s, 30m, 24h, 7d), or none"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return None if seconds == 0 else timedelta(seconds=seconds)


def run_timeout_from_env(env: Mapping[str, str] | None = None) -> timedelta | None:
    """``DURABLE_AGENT_RUN_TIMEOUT`` if set (``ValueError`` if malformed), else the default."""
    value = (os.environ if env is None else env).get(ENV_RUN_TIMEOUT, "").strip()
    return parse_timeout(value) if value else DEFAULT_EXECUTION_TIMEOUT
