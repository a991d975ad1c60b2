"""Input constructors: what ``run`` and ``append`` take.

They wrap the message constructors in a :class:`MessageEntry` with no header; the agent stamps
the header when it records the entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..agent.options import AgentOptions
from ..ai.messages import (
    FileContent,
    ImageContent,
    Message,
    TextContent,
    user_file_message,
    user_image_message,
    user_message,
)
from ..session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry
from ..session.ids import CLIENT_ID, CLIENT_ID_RULE, quoted
from .errors import InvalidRunInputError

__all__ = [
    "EMPTY_MESSAGE",
    "NOTHING_TO_ANSWER",
    "EntryLike",
    "as_entry",
    "check_agent_options",
    "check_run_input",
    "empty_message",
    "ephemeral",
    "file",
    "image",
    "meta",
    "text",
]

EMPTY_MESSAGE = "is empty: a message the model is sent needs content"
NOTHING_TO_ANSWER = (
    "nothing to answer: the session holds no conversation at the run's leaf and the run has "
    "no input"
)

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


def empty_message(message: Message) -> bool:
    """No content, or only blank text: nothing a model could answer."""
    return all(isinstance(b, TextContent) and not b.text.strip() for b in message.content)


def check_run_input(entries: Sequence[Entry], *, nothing_stored: bool) -> None:
    """Refuse a run that would store an empty message or call the model with none, before
    anything is stored: :class:`InvalidRunInputError` naming the input (``inputs[i].content``,
    or ``inputs`` when there is none and ``nothing_stored`` at the run's leaf)."""
    for i, entry in enumerate(entries):
        if isinstance(entry, MessageEntry) and empty_message(entry.message):
            raise InvalidRunInputError(f"inputs[{i}].content", EMPTY_MESSAGE)
    if not entries and nothing_stored:
        raise InvalidRunInputError("inputs", NOTHING_TO_ANSWER)


def check_run_id(run_id: str) -> None:
    """A run's ID is part of its workflow ID, and a worker takes one a person may type into
    the Temporal UI: 1-64 characters of the rule below, the HTTP API's. Both executors refuse
    another at ``run()``, so a run never fails on Temporal alone for its ID."""
    if not re.fullmatch(CLIENT_ID, run_id):
        raise InvalidRunInputError("run_id", f"invalid run ID {quoted(run_id)}: {CLIENT_ID_RULE}")


def check_agent_options(options: dict[str, Any]) -> AgentOptions:
    """``new()``'s options as a loop takes them: an unknown one is a ``TypeError``."""
    if "history" in options:
        raise TypeError("history is not an agent option: it comes from the session")
    unknown = set(options) - set(AgentOptions.model_fields)
    if unknown:
        raise TypeError(f"unknown agent option(s): {', '.join(sorted(unknown))}")
    try:
        return AgentOptions(**options)
    except ValidationError as exc:
        # a value no run could use is refused as a run's input is (the worker checks the same
        # options under the same names): one line naming the option, not pydantic's report
        first = exc.errors()[0]
        field = ".".join(["options", *(str(part) for part in first["loc"])])
        problem = first["msg"].replace("Input should be", "must be", 1)
        raise InvalidRunInputError(field, problem) from None
