"""Session and store errors. Every one is a :class:`SessionError`; wrappers chain ``__cause__``."""

from __future__ import annotations

from typing import Any

__all__ = [
    "CorruptSessionError",
    "EntryConflictError",
    "EntryDecodeError",
    "EntryEncodeError",
    "EntryTooLargeError",
    "InvalidSessionIdError",
    "ParentNotFoundError",
    "SessionError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StoreClosedError",
    "StoreUnavailableError",
]


class SessionError(Exception):
    """Base class of every session and store error."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its message and attributes without calling ``__init__``, whose parameters
        # are not the message it made of them: the default reduce passes the message back to
        # ``__init__`` (a TypeError, or the message wrapped twice), so the error could not be
        # pickled to another process or deep-copied.
        return (type(self).__new__, (type(self),), {**self.__dict__, "args": self.args})


class SessionNotFoundError(SessionError, LookupError):
    """The session was never created in this store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id


class SessionExistsError(SessionError):
    """``create_session`` found the session already there."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        super().__init__(
            f"session {session_id!r} already exists" + (f": {detail}" if detail else "")
        )
        self.session_id = session_id


class InvalidSessionIdError(SessionError, ValueError):
    """A session ID outside the allowed alphabet or length; raised before any I/O."""


class EntryConflictError(SessionError):
    """An append reused a stored entry ID with different content; nothing of the batch was
    written."""

    def __init__(self, session_id: str, entry_id: str) -> None:
        super().__init__(
            f"entry {entry_id!r} of session {session_id!r} is already stored with other content"
        )
        self.session_id = session_id
        self.entry_id = entry_id


class ParentNotFoundError(SessionNotFoundError):
    """An append's entry names a parent the session does not hold (nor the batch): the session
    its writer continues is not this one, most often because it was deleted and created again
    under the ID since the writer loaded it (a run still going then fails with this, a
    :class:`SessionNotFoundError`). Nothing of the batch was written."""

    def __init__(self, session_id: str, entry_id: str, parent_id: str) -> None:
        SessionError.__init__(
            self,
            f"entry {entry_id!r} names parent {parent_id!r}, which session {session_id!r} does "
            "not hold (deleted and created again since its writer loaded it?)",
        )
        self.session_id = session_id
        self.entry_id = entry_id
        self.parent_id = parent_id


class EntryDecodeError(SessionError, ValueError):
    """Wire data that is not a valid entry (bad JSON, unknown type or block, bad header)."""


class EntryEncodeError(SessionError, ValueError):
    """An entry no store can write: its custom data has no JSON form (bytes, a set, nesting
    deeper than the encoder goes) or its text is not valid Unicode (a lone surrogate, as
    ``os.listdir`` returns for a non-UTF-8 file name). Messages never raise it (they replace
    such code points with U+FFFD when built); application data is not rewritten behind the
    caller's back, so it is refused before anything of the batch is stored. ``session_id`` is
    ``""`` when the codec alone raised it (no store involved).
    """

    def __init__(self, session_id: str, entry_id: str, reason: str) -> None:
        where = f" of session {session_id!r}" if session_id else ""
        name = f"entry {entry_id!r}" if entry_id else "the entry"  # an input not yet stamped
        super().__init__(f"{name}{where} cannot be stored: {reason}")
        self.session_id = session_id
        self.entry_id = entry_id
        self.reason = reason

    @staticmethod
    def no_utf8(exc: UnicodeEncodeError) -> str:
        """The reason given when encoding an entry's wire to UTF-8 raised ``exc``."""
        point = f"U+{ord(exc.object[exc.start]):04X}"
        return f"its text holds {point}, a lone surrogate with no UTF-8 form"


class CorruptSessionError(SessionError):
    """A stored session cannot be read back: a damaged header or a damaged complete line.

    ``line`` and ``path`` say where, when the store knows (a FileStore names its file, so the
    operator who must repair or remove it need not work out the store's layout)."""

    def __init__(
        self, session_id: str, message: str, *, line: int | None = None, path: str | None = None
    ) -> None:
        where = f" (line {line})" if line is not None else ""
        located = f" in {path}" if path else ""
        super().__init__(f"session {session_id!r}: {message}{where}{located}")
        self.session_id = session_id
        self.message = message
        self.line = line
        self.path = path

    def at(self, path: str) -> CorruptSessionError:
        """The same error, naming the file (or other place) the session was read from."""
        return CorruptSessionError(self.session_id, self.message, line=self.line, path=path)


class EntryTooLargeError(SessionError):
    """An entry's encoding exceeds the store's size limit; nothing of its batch was written."""

    def __init__(self, session_id: str, entry_id: str, size: int, limit: int) -> None:
        super().__init__(
            f"entry {entry_id!r} of session {session_id!r} encodes to {size} bytes (limit {limit})"
        )
        self.session_id = session_id
        self.entry_id = entry_id
        self.size = size
        self.limit = limit


class StoreUnavailableError(SessionError):
    """The backend is down or an OS error stopped the operation; the cause is chained."""


class StoreClosedError(StoreUnavailableError):
    """The store object was closed (``aclose()``, or the end of its ``async with``), or the
    database client it was built on was: this object serves no more calls. What it stored stays;
    a new store object reads it. A :class:`StoreUnavailableError`, so a run's activity that hit
    a worker's store closing under it is retried (on another worker) rather than failed."""

    def __init__(self, store: str, detail: str = "") -> None:
        super().__init__(f"this {store} is closed" + (f" ({detail})" if detail else ""))
        self.store = store
