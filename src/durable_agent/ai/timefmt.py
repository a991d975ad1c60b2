"""RFC 3339 timestamps as the wire format writes them.

Every stored time is aware UTC with microsecond precision. The wire form ends in ``Z`` and drops
trailing fractional zeros, so equal datetimes always encode to identical strings (the codec's
idempotency check compares strings). JSON holding a time in that form is parsed natively by
pydantic (see :mod:`~durable_agent.ai.wirefields`; an aware UTC datetime whose ``tzinfo`` is
pydantic's own zero offset); any other form by :func:`parse_time`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, PlainSerializer
from pydantic_core import core_schema as cs

from .wirefields import JsonNativeFirst, json_native_first

__all__ = ["LenientTime", "UtcDatetime", "format_time", "parse_time", "to_utc", "utc_now"]

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)


def utc_now() -> datetime:
    """The current time, aware UTC."""
    return datetime.now(UTC)


def to_utc(value: datetime) -> datetime:
    """Normalise a datetime to aware UTC; a naive value is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def format_time(value: datetime) -> str:
    """``2026-01-02T03:04:05Z`` or ``…05.5Z``: UTC, trailing fractional zeros dropped."""
    value = to_utc(value)
    # Not strftime: glibc's %Y does not zero-pad years before 1000, which would not parse back.
    base = (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    )
    if value.microsecond:
        base += "." + f"{value.microsecond:06d}".rstrip("0")
    return base + "Z"


_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z", re.ASCII)


def _canonical(text: str) -> bool:
    """``YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z`` exactly, which ``datetime.fromisoformat`` reads fast."""
    return _CANONICAL.fullmatch(text) is not None


def parse_time(text: str) -> datetime:
    """Parse RFC 3339 with ``Z`` or ``±hh:mm`` and up to 9 fractional digits (truncated to 6).

    Raises ``ValueError`` for anything else.
    """
    if _canonical(text):
        return datetime.fromisoformat(text)  # the common case, what format_time writes
    match = _RFC3339.match(text.strip())
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second, frac, zone = match.groups()
    micro = int((frac or "").ljust(6, "0")[:6])
    if zone in ("Z", "z"):
        tz = UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        parsed = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=tz
        )
        return parsed.astimezone(UTC)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ValueError(f"time out of range: {text!r}") from exc


def _coerce(value: Any) -> Any:
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, str):
        return parse_time(value)
    return value


def _lenient(value: Any) -> datetime | None:
    """Wire timestamps that cannot be parsed read as ``None`` rather than failing the entry."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, str):
        try:
            return parse_time(value)
        except ValueError:
            return None
    return None


#: What :func:`format_time` writes: the one form pydantic's own parser reads for the wire, since
#: it reads every such string exactly as :func:`parse_time` does (or refuses it, as that does).
_WRITTEN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z$"


def _written_time() -> cs.CoreSchema:
    return cs.chain_schema([cs.str_schema(pattern=_WRITTEN), cs.datetime_schema()])


class _Utc(JsonNativeFirst):
    """``Annotated`` marker of :data:`UtcDatetime`'s validation."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return json_native_first(
            _written_time(), cs.no_info_before_validator_function(_coerce, handler(source))
        )


class _Lenient(JsonNativeFirst):
    """``Annotated`` marker of :data:`LenientTime`'s validation."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return json_native_first(
            cs.nullable_schema(_written_time()),
            cs.no_info_before_validator_function(_lenient, handler(source)),
        )


def _format_optional(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


UtcDatetime = Annotated[
    datetime,
    _Utc,
    PlainSerializer(format_time, return_type=str, when_used="json"),
]
"""A datetime field that is always aware UTC and serializes as the wire's RFC 3339 form."""

LenientTime = Annotated[
    datetime | None,
    _Lenient,
    PlainSerializer(_format_optional, when_used="json"),
]
"""An optional wire time that reads as ``None`` when it cannot be parsed."""
