"""Session-ID rules and generated IDs.

Session IDs are chosen by applications and validated by every store before any I/O, so a path
(``../etc``) or a query operator (``{"$ne": null}``) never reaches a file system or a database.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from .errors import InvalidSessionIdError

__all__ = [
    "CLIENT_ID",
    "CLIENT_ID_RULE",
    "MAX_SESSION_ID_LENGTH",
    "new_id",
    "quoted",
    "shortened",
    "validate_session_id",
]

MAX_SESSION_ID_LENGTH = 200
_SESSION_ID = re.compile(r"[A-Za-z0-9\-_.:@]{1,200}")
CLIENT_ID = r"^[A-Za-z0-9_-]{1,64}$"
"""A run or message ID a client may give (a run's becomes part of its workflow ID)."""
CLIENT_ID_RULE = "use 1-64 characters from ASCII letters, digits, - and _"


def quoted(value: str) -> str:
    """``value`` quoted for a message, its first 60 characters: an ID or name a person typed
    may be huge, and a failure quoting it whole can outgrow what Temporal records."""
    return repr(shortened(value))


def shortened(value: str) -> str:
    """``value``'s first 60 characters, ``…`` marking a cut: a name shown unquoted (a field)."""
    return value if len(value) <= 60 else value[:60] + "…"


def validate_session_id(session_id: Any) -> str:
    """Return ``session_id`` if it is valid, else raise :class:`InvalidSessionIdError`."""
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(f"session ID must be a str, not {type(session_id).__name__}")
    if session_id in (".", "..") or not _SESSION_ID.fullmatch(session_id):
        raise InvalidSessionIdError(
            f"invalid session ID {quoted(session_id)}: use 1-{MAX_SESSION_ID_LENGTH} characters "
            "from ASCII letters, digits and -_.:@ (not . or ..)"
        )
    return session_id


def new_id() -> str:
    """A fresh 16-hex-character ID from 8 random bytes."""
    return secrets.token_bytes(8).hex()
