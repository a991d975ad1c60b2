"""``chat`` while a run works, on both executors: what is typed goes into the run (a steer
after the turn's tool results, ``/later`` after the final reply), answers to a waiting call
come from the same lines, and a message the run did not take starts the next run
(docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio
import io
import queue
from typing import Any

import pytest
from rich.console import Console

from durable_agent import Agent, InvalidSessionIdError, MessageEntry, SessionNotFoundError
from durable_agent.cli.approvals import Lines
from durable_agent.cli.chat import Chat
from durable_agent.cli.demo_app import TOOLS, demo_spec
from durable_agent.stores import MemoryStore
from tests.durable_runs.test_steering import queued
from tests.support.polling import eventually

pytestmark = pytest.mark.temporal


class Typist:
    """Lines the test types: the chat's reader thread blocks on them as on a terminal."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()

    def type(self, *lines: str | None) -> None:
        for line in lines:
            self.lines.put(line)

    def read(self) -> str:
        line = self.lines.get()
        if line is None:
            raise EOFError
        return line


async def _true(value: bool) -> bool:
    return value


def story(agent: Agent) -> list[str]:
    """The session's stored messages, one short line each."""
    out = []
    for entry in agent.entries():
        if not isinstance(entry, MessageEntry) or entry.ephemeral:
            continue
        message = entry.message
        if message.role == "tool_result":
            out.append(f"result {message.tool_name}")
        elif message.tool_calls():
            out.append("call " + " ".join(c.name for c in message.tool_calls()))
        else:
            out.append(f"{message.role}: {message.text()}")
    return out


async def open_chat(
    harness: Any, typed: bool = True, **options: Any
) -> tuple[Chat, Typist, io.StringIO]:
    agent = await harness.open(demo_spec({}).model, store=MemoryStore(), tools=TOOLS, **options)
    typist, screen = Typist(), io.StringIO()
    lines = Lines(asyncio.get_running_loop(), typist.read)
    lines.typed = typed
    console = Console(file=screen, width=200, no_color=True)
    # in process: no opened store or Temporal executor for the chat to hold
    chat = Chat(console, agent, None, None, "demo", lines)  # type: ignore[arg-type]
    return chat, typist, screen


async def test_typed_while_a_call_waits(harness: Any) -> None:
    chat, typist, screen = await open_chat(harness)
    typist.type("/steer Also check the weather in Lisbon.", "/later What's the weather in Paris?")

    async def approve_once_asked() -> None:
        # as a person would: once the question shows and the run holds both messages (else
        # the decision could overtake them)
        await eventually(
            lambda: _true("[y / n reason / e]" in screen.getvalue()), what="a question"
        )
        await queued(chat.agent, 2, getattr(harness, "client", None))
        typist.type("y")

    approving = asyncio.ensure_future(approve_once_asked())
    try:
        await chat.turn("Email the Q3 figures to the team.")
        await approving
    finally:
        typist.type(None)
    told = story(chat.agent)
    assert told[:6] == [
        "user: Email the Q3 figures to the team.",
        "call send_email",
        "result send_email",
        "user: Also check the weather in Lisbon.",  # between the two tool calls
        "call get_weather",
        "result get_weather",
    ]
    assert told[6].startswith("assistant: ") and "Lisbon" in told[6]
    assert told[7:] == [
        "user: What's the weather in Paris?",  # after the final reply
        "call get_weather",
        "result get_weather",
        told[10],
    ]
    assert "Paris" in told[10]
    assert "✉ steer: Also check" in screen.getvalue()
    assert chat.carried == []


async def test_a_line_typed_while_a_tool_runs_steers_the_run(harness: Any) -> None:
    chat, typist, screen = await open_chat(harness)

    async def steer_once_working() -> None:
        await eventually(lambda: _true("crunch_numbers" in screen.getvalue()), what="the tool")
        typist.type("Also check the weather in Lisbon.", "/tree")

    steering = asyncio.ensure_future(steer_once_working())
    try:
        await chat.turn("What were Q2 sales?")
        await steering
    finally:
        typist.type(None)
    told = story(chat.agent)
    assert told[:6] == [
        "user: What were Q2 sales?",
        "call crunch_numbers",
        "result crunch_numbers",
        "user: Also check the weather in Lisbon.",
        "call get_weather",
        "result get_weather",
    ]
    assert chat.held == "/tree" and "/tree: once the agent is done" in screen.getvalue()


async def test_piped_lines_wait_for_the_run_before_them(harness: Any) -> None:
    """Lines from a pipe or a file (``durable-agent chat s < questions.txt``) are all there at
    once: they were sent into the first run as steers, each landing wherever the pipe was read.
    Each is now a question of its own, asked once the run before it ended."""
    chat, typist, screen = await open_chat(harness, typed=False)
    typist.type("What's the weather in Paris?")
    try:
        await chat.turn("What were Q2 sales?")
        assert await asyncio.wait_for(chat.lines.get(), 10) == "What's the weather in Paris?"
    finally:
        typist.type(None)
    told = story(chat.agent)
    assert [line for line in told if line.startswith("user: ")] == ["user: What were Q2 sales?"]
    assert "✉" not in screen.getvalue()


async def test_a_message_the_run_did_not_take_starts_the_next_run(harness: Any) -> None:
    chat, typist, screen = await open_chat(harness)
    try:
        stream = await chat.agent.run("What's the weather in Lisbon?")
        await chat.follow(stream)
        await chat.send(stream, "And what's the weather in Paris?", "next_turn")
        assert chat.carried == ["And what's the weather in Paris?"]
        assert "it starts the next run" in screen.getvalue()
        await chat.turn(*chat.carried)
    finally:
        typist.type(None)
    told = story(chat.agent)
    assert told[4:] == [
        "user: And what's the weather in Paris?",
        "call get_weather",
        "result get_weather",
        told[7],
    ]


async def test_an_answer_after_the_run_parked_starts_the_continuation(harness: Any) -> None:
    """The run parks (``approval_wait`` runs out) while the question is on screen; the answer
    is then stored at the leaf, and chat starts the run that goes on, as ``approve`` does."""
    chat, typist, screen = await open_chat(harness, approval_wait=0.5)

    async def approve_once_parked() -> None:
        await eventually(
            lambda: _true("[y / n reason / e]" in screen.getvalue() and not chat.agent.running),
            what="a question, and the run parked",
        )
        assert chat.agent.pending_approvals()
        typist.type("y")

    approving = asyncio.ensure_future(approve_once_parked())
    try:
        await chat.turn("Email the Q3 figures to the team.")
        await approving
    finally:
        typist.type(None)
    told = story(chat.agent)
    assert told[:3] == [
        "user: Email the Q3 figures to the team.",
        "call send_email",
        "result send_email",
    ]
    assert told[3].startswith("assistant: ")
    assert "every call of the turn is decided: continuing in run" in screen.getvalue()
    assert chat.agent.pending_approvals() == []
    assert not chat.agent.running


async def test_a_fork_id_with_a_space_is_refused_not_cut(harness: Any) -> None:
    """``/fork bad id`` forked into ``bad``, the rest of the line dropped without a word."""
    chat, _, _ = await open_chat(harness)
    await chat.agent.append("one")
    parent = chat.agent
    with pytest.raises(InvalidSessionIdError, match="'bad id'"):
        await chat.command("/fork bad id")
    assert chat.agent is parent
    with pytest.raises(SessionNotFoundError):
        await parent.store.load_entries("bad")
