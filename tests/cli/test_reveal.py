"""The CLI's run printer writes a reply that comes in batches (Temporal's live writes) out at the
pace it came, and one that comes token by token (in process) as it comes."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable

from rich.console import Console

from durable_agent import Event
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.cli.run import RunPrinter

FIRST = "The first tokens "
BATCH = "and then a whole second of them, forty or so."


class _Screen(io.StringIO):
    """A console file that records what was written when."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return len(text)

    @property
    def text(self) -> str:
        return "".join(w for _, w in self.writes)


def _event(kind: str, text: str | None = None) -> Event:
    message = Message(role="assistant", content=[] if text is None else [TextContent(text=text)])
    return Event(type="agent", session_id="s", agent=AgentEvent(type=kind, message=message))


def _printer() -> tuple[RunPrinter, _Screen]:
    screen = _Screen()
    printer = RunPrinter(Console(file=screen, width=300, color_system=None))
    printer.handle(_event("message_start"))
    return printer, screen


async def _until(check: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "the text was not written out in time"
        await asyncio.sleep(0.01)


async def test_a_batch_that_took_long_to_come_is_written_out_over_that_time() -> None:
    printer, screen = _printer()
    printer.handle(_event("message_update", FIRST))
    assert screen.text.endswith(FIRST)  # the first batch: at once
    loop = asyncio.get_running_loop()
    came = loop.create_future()
    loop.call_later(0.5, came.set_result, None)  # the next batch comes half a second later
    await came
    added = time.monotonic()
    printer.handle(_event("message_update", FIRST + BATCH))
    assert not screen.text.endswith(BATCH)
    await _until(lambda: screen.text.endswith(FIRST + BATCH))
    pieces = [(at, w) for at, w in screen.writes if at >= added and w]
    took = pieces[-1][0] - added
    # written in many pieces over most of the half second, not at once and not after it
    assert len(pieces) >= 5
    assert 0.3 <= took <= 0.6, took
    assert "".join(w for _, w in pieces) == BATCH


async def test_a_receipt_writes_out_the_rest_first_and_the_text_once() -> None:
    printer, screen = _printer()
    printer.handle(_event("message_update", FIRST))
    loop = asyncio.get_running_loop()
    came = loop.create_future()
    loop.call_later(0.4, came.set_result, None)
    await came
    printer.handle(_event("message_update", FIRST + BATCH))
    printer.handle(_event("message_end", FIRST + BATCH))
    assert screen.text.count(FIRST + BATCH) == 1
    assert screen.text.rstrip().endswith(FIRST + BATCH)


async def test_tokens_that_come_quickly_are_written_as_they_come() -> None:
    printer, screen = _printer()
    text = ""
    for word in ("one ", "two ", "three ", "four "):
        text += word
        printer.handle(_event("message_update", text))  # well within SMOOTH_ABOVE of the last
        assert screen.text.endswith(text)
