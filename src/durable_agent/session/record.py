"""SessionRecord: a session's existence and lineage, written once by ``create_session``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..ai.timefmt import UtcDatetime

__all__ = ["SessionRecord"]


class SessionRecord(BaseModel):
    """Exactly ``id``, ``parent_id`` (the fork source, or ``None``) and ``created_at``.

    It holds no application state: titles, modes and model choices live in the application's own
    storage, keyed by session ID.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    parent_id: str | None = None
    created_at: UtcDatetime
