"""Input constructors: what ``run`` and ``append`` take.

They wrap the message constructors in a :class:`MessageEntry` with no header; the agent stamps
the header when it records the entry.
"""

from __future__ import annotations

from ..ai.messages import (
    FileContent,
    ImageContent,
    Message,
    user_file_message,
    user_image_message,
    user_message,
)
from ..session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry

__all__ = ["EntryLike", "as_entry", "ephemeral", "file", "image", "meta", "text"]

EntryLike = Entry | str
"""An entry, or a string standing for ``text(s)``."""


def text(s: str) -> MessageEntry:
    """A user text message."""
    return MessageEntry(message=user_message(s))


def image(s: str, *images: ImageContent) -> MessageEntry:
    """A user message with text then images."""
    return MessageEntry(message=user_image_message(s, *images))


def file(s: str, *files: FileContent) -> MessageEntry:
    """A user message with text then files."""
    return MessageEntry(message=user_file_message(s, *files))


def meta(message: Message | str) -> MessageEntry:
    """Context the model sees and the transcript hides (stored)."""
    msg = user_message(message) if isinstance(message, str) else message
    return MessageEntry(message=msg, meta=True)


def ephemeral(entry: MessageEntry | str) -> MessageEntry:
    """A copy seen by the model for one run and never stored (``meta`` kept)."""
    base = text(entry) if isinstance(entry, str) else entry
    return base.model_copy(update={"ephemeral": True})


def as_entry(value: EntryLike) -> Entry:
    """Normalise a ``run``/``append`` argument."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, (MessageEntry, CompactionEntry, CustomEntry)):
        return value
    raise TypeError(f"expected an entry or str, not {type(value).__name__}")
