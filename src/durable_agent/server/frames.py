"""The frames a session hub sends its subscribers (:mod:`.hub`): each a server-sent event of
the session stream (:mod:`.sse`), which the AG-UI stream translates (:mod:`.agui`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..session.codec import entry_to_wire
from ..session.entries import Entry
from .runs import RunFailure

__all__ = ["Frame", "entry_frame", "gone", "status_frame"]


@dataclass(frozen=True)
class Frame:
    """One server-sent event: ``event``, ``data`` (JSON), ``id`` (entries only: the seq)."""

    event: str
    data: dict[str, Any]
    id: int | None = None


def entry_frame(seq: int, entry: Entry) -> Frame:
    return Frame("entry", {"seq": seq, "entry": entry_to_wire(entry)}, seq)


def gone(code: str) -> Frame:
    """A subscriber's last frame, its hub letting it go for ``code``: ``TooSlow``,
    ``ServerStopping``, ``StoreUnavailableError``, ``StreamFailed``, ``deleted``. The session
    stream just ends (its client comes back); an AG-UI stream says why (:mod:`.agui_ends`)."""
    return Frame("gone", {"code": code})


def status_frame(run_id: str, status: str, failure: RunFailure | None = None) -> Frame:
    if failure is None:
        return Frame("run", {"run_id": run_id, "status": status})
    return Frame("run", {"run_id": run_id, "status": status, "error": failure.model_dump()})
