"""What the provider adapters share: error building (redacted, see ``..redaction``), retry hints,
tool arguments.

Nothing here imports a provider SDK, so it is importable (and testable) without the extras.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from ..messages import MAX_NESTING, ContentBlock, Message, StopReason, Usage, nests_deeper
from ..model import ModelError
from ..redaction import REDACTED, redact
from ..timefmt import utc_now

T = TypeVar("T")

__all__ = [
    "REDACTED",
    "Draft",
    "call_arguments",
    "final_arguments",
    "guarded",
    "model_error",
    "partial_arguments",
    "redact",
    "retry_after_seconds",
    "should_retry",
    "status_retryable",
]

_MAX_DETAIL = 500
"""Provider error text kept in a ModelError (errors travel in Temporal failures: keep it short)."""


def status_retryable(status: int) -> bool:
    """Whether an HTTP status is worth retrying: timeouts, conflicts, rate limits, server errors.

    The same set the SDKs retry themselves (408, 409, 429, 5xx); their own retries are turned off so
    that this decision, and the backoff, belong to the caller's retry policy.
    """
    return status in (408, 409, 429) or status >= 500


def should_retry(headers: Mapping[str, str], *, default: bool) -> bool:
    """The provider's ``x-should-retry`` verdict (``true``/``false``) when it sent one, else
    ``default``: the SDKs honour it over their own status rules, and so do we."""
    should = headers.get("x-should-retry")
    return should == "true" if should in ("true", "false") else default


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """The provider's retry hint in seconds from ``retry-after-ms`` or ``retry-after``.

    ``retry-after`` may be delta-seconds or an HTTP date; unparsable or negative values are no hint.
    """
    if not headers:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def model_error(
    provider: str,
    summary: str,
    *,
    retryable: bool,
    detail: str | None = None,
    retry_after: float | None = None,
    secrets: Iterable[str | None] = (),
) -> ModelError:
    """A ModelError whose message is ``"<provider>: <summary>[: <detail>]"``, redacted and bounded.

    Only what is built here reaches the message: never the SDK exception's text (which can hold a
    request dump) and never request headers. Raise it outside the ``except`` block that caught the
    SDK error, so no ``__context__`` chain carries the original along into a Temporal failure.
    """
    text = f"{provider}: {summary}"
    if detail:
        detail = " ".join(detail.split())
        if len(detail) > _MAX_DETAIL:
            detail = detail[: _MAX_DETAIL - 1] + "…"
        text = f"{text}: {detail}"
    if retry_after is not None:
        text = f"{text} (retry after {retry_after:g}s)"
    return ModelError(redact(text, secrets), retryable=retryable, retry_after=retry_after)


def partial_arguments(raw: str) -> dict[str, Any]:
    """Best-effort arguments from incomplete JSON, for rendering a call as it streams."""
    if not raw.strip():
        return {}
    try:
        import jiter  # a dependency of both SDKs; absent, partial calls just show no arguments

        value = jiter.from_json(raw.encode(), partial_mode="trailing-strings", allow_inf_nan=False)
    except (ImportError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):
        raise ValueError(f"{number} is past a float's range")
    return value


def final_arguments(raw: str) -> dict[str, Any] | None:
    """The arguments of a completed call: ``{}`` for no text, ``None`` if not a JSON object
    that a store keeps as it is: ``NaN`` and ``Infinity``, which Python's parser takes, are not
    JSON, and a number past a float's range (``1e400``) it reads as an infinity, which a store
    would write as ``null``; nor is nesting past half of what an entry may hold (``MAX_NESTING``).
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or nests_deeper(value, MAX_NESTING // 2):
        return None  # no tool wants that nesting, and the entry around it must fit
    return value


def call_arguments(
    provider: str, raw: str, *, truncated: bool, malformed: str
) -> dict[str, Any] | None:
    """The arguments of a streamed call once the reply ended; ``None`` when the reply was cut at
    its token limit before they were whole (no text yet, or not yet a JSON object). Such a call
    is no call to run: a tool given what parses of them acts on half its input (a file written
    to half a line, every field there) and says it went well; its adapter leaves it out of the
    reply, kept as cut. Text that is not a JSON object otherwise is a retryable error
    (``malformed`` says so)."""
    arguments = final_arguments(raw)
    if truncated and (arguments is None or not raw.strip()):
        return None
    if arguments is None:
        raise model_error(provider, malformed, retryable=True)
    return arguments


class Draft:
    """The assistant message being streamed: blocks so far, and snapshots of it for each event."""

    def __init__(self, *, api: str, provider: str, model: str) -> None:
        self.api = api
        self.provider = provider
        self.model = model
        self.blocks: list[ContentBlock] = []

    def snapshot(self, **end: Any) -> Message:
        """The message so far, as a consumer may render it mid-stream (``end``: the fields only
        the final message has, see :meth:`final`)."""
        return Message(
            role="assistant",
            content=list(self.blocks),
            api=self.api,
            provider=self.provider,
            model=self.model,
            timestamp=utc_now(),
            **end,
        )

    def final(self, *, usage: Usage, stop_reason: StopReason, error: str | None = None) -> Message:
        return self.snapshot(usage=usage, stop_reason=stop_reason, error=error)


async def guarded(
    items: AsyncIterable[T],
    errors: tuple[type[Exception], ...],
    to_error: Callable[[Exception], ModelError],
) -> AsyncGenerator[T, None]:
    """Iterate an SDK stream, turning its failures into :class:`ModelError`.

    The ModelError is raised outside the ``except`` block, so the SDK error (which holds the
    request, headers included) is neither its cause nor its context.
    """
    iterator = items.__aiter__()
    while True:
        error: ModelError | None = None
        try:
            item = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except errors as exc:
            error = to_error(exc)
        if error is not None:
            raise error
        yield item
