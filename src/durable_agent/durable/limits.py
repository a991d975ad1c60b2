"""Size limits, stated once.

Temporal refuses any payload (an activity argument or result, a workflow input, a query answer)
over 2 MB (2_097_152 bytes). The library keeps every single message under a lower limit, so one
message, its entry header and the envelope around it always fit: an input entry, a model reply, a
tool result or a stored entry over :data:`PAYLOAD_LIMIT` encoded bytes raises
:class:`~durable_agent.durable.errors.PayloadTooLargeError` and nothing of it is stored. Everything
else that crosses the boundary (continue-as-new inputs, query answers) is kept well under the
server's limit by leaving message bodies out and naming their stored entries instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ..session.codec import encode_entry
from ..session.entries import Entry
from ..session.errors import EntryEncodeError
from .errors import PayloadTooLargeError

__all__ = ["PAYLOAD_LIMIT", "TEMPORAL_BLOB_LIMIT", "as_stored", "check_entry", "check_payload"]

PAYLOAD_LIMIT = 1_572_864
"""1.5 MiB: the largest encoded entry (message plus header) a run accepts
(docs/design.md#bounded-history)."""

_WIDEST_HEADER = {
    "id": "f" * 16,
    "parent_id": "f" * 16,
    "created_at": datetime(2000, 1, 1, microsecond=111111, tzinfo=UTC),
}
"""A header as long as any an entry is stored under: a 16-hex ID and parent (client-drawn or
from ``workflow.random()``) and a time with every fractional digit. Fixed, not drawn, so
workflow code (a validator) measures alike."""

TEMPORAL_BLOB_LIMIT = 2_097_152
"""The Temporal server's default per-payload limit, which nothing the library sends may reach."""


def check_payload(payload: str, what: str, limit: int = PAYLOAD_LIMIT) -> None:
    """Raise :class:`PayloadTooLargeError` when ``payload`` encodes to more than ``limit`` bytes:
    the one check (and wording) for run inputs (client), stored entries (workflow), model
    replies and tool results (activities)."""
    size = len(payload.encode("utf-8"))
    if size > limit:
        raise PayloadTooLargeError(f"{what} is {size} bytes, over the {limit}-byte payload limit")


def as_stored(entry: Entry) -> str:
    """``entry`` encoded under the widest header it can be stored under: the size the payload
    limit applies to. An entry that fits only without its header (an input, a parallel call's
    result stamped by the run, a summary) would fail the run that stores it."""
    return encode_entry(entry.model_copy(update=_WIDEST_HEADER))


def check_entry(entry: Entry, what: str, limit: int = PAYLOAD_LIMIT) -> None:
    """:func:`check_payload` of ``entry`` :func:`as_stored`; an entry no store could write
    raises the stores' :class:`EntryEncodeError` (text with no UTF-8 form included), naming
    the entry's own ID, not the stand-in header it was measured under."""
    try:
        check_payload(as_stored(entry), what, limit)
    except EntryEncodeError as exc:
        raise EntryEncodeError("", entry.id, exc.reason) from None
    except UnicodeEncodeError as exc:
        raise EntryEncodeError("", entry.id, EntryEncodeError.no_utf8(exc)) from None
