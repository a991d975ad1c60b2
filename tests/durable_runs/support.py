"""What the durable-run tests share: scripted turns, the ``echo`` tool, event and entry
readers. The fixtures (``harness``, ``store``) come from ``tests/conftest.py``.

Harness scenarios run on every executor; they do not assert on what Temporal legitimately cannot
give (``message_update`` events, ephemeral copies in ``entries()``, retry ``message_start``s).
Those assertions live in the in-process-only tests that call ``new`` directly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agent import (
    Event,
    MessageEntry,
    RunCancelledError,
)
from durable_agent.ai import (
    Message,
    Reply,
    TextContent,
    ToolCall,
    assistant_message,
    tool,
    user_message,
)
from durable_agent.session import Entry

FAST_RETRY = {"max_attempts": 3, "initial_interval": 0}
"""Plain data (valid on every executor): retries without waiting."""

ONE_TOOL_TURN = [
    "agent_start",
    "turn_start",
    "message_start",
    "message_end",
    "tool_execution_start",
    "tool_execution_end",
    "message_start",
    "message_end",
    "turn_end",
    "turn_start",
    "message_start",
    "message_end",
    "turn_end",
    "agent_end",
]


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


def echo_turn(text: str = "x") -> list[Reply | str]:
    """The model's side of ``ONE_TOOL_TURN``: call ``echo`` with ``text`` (ID ``c1``), then answer
    ``done``."""
    return [Reply.call("echo", {"text": text}, id="c1"), "done"]


def kinds(events: Sequence[Event], *, updates: bool = True) -> list[str]:
    out: list[str] = []
    for event in events:
        assert event.agent is not None
        if not updates and event.agent.type in ("message_update", "tool_execution_update"):
            continue
        out.append(event.agent.type)
    return out


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


def stored_texts(entries: Sequence[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


def assert_chain(entries: Sequence[Entry]) -> None:
    for parent, child in itertools.pairwise(entries):
        assert child.parent_id == parent.id


async def collect(stream: Any) -> list[Event]:
    return [e async for e in stream.events()]


async def collect_until_cancelled(stream: Any) -> list[Event]:
    events: list[Event] = []
    with pytest.raises(RunCancelledError):
        async for event in stream.events():
            events.append(event)
    return events


def dangling_session_entries() -> list[Entry]:
    """What a crash between an assistant tool call and its result leaves."""
    return [
        MessageEntry(id="u1", message=user_message("go")),
        MessageEntry(
            id="a1",
            parent_id="u1",
            message=assistant_message(
                TextContent(text="let me check"), ToolCall(id="call-9", name="echo")
            ),
        ),
    ]
