"""The CLI's run printer on live Temporal replies: tokens reach the terminal as
they stream from the worker, and a restarted reply starts its line over."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import Client

from durable_agent import Event, Reply, ScriptedModel, new
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.cli.run import RunPrinter
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import executor, queue, sid
from tests.temporal.test_live_tokens import LONG

pytestmark = pytest.mark.temporal


class _Writes(io.StringIO):
    """A console file that keeps every write separately (what a terminal shows, as it shows it)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)


async def test_the_cli_printer_shows_temporal_replies_token_by_token(
    temporal_client: Client, tmp_path: Path
) -> None:

    store = FileStore(tmp_path / "sessions")
    lm = ScriptedModel([Reply(text=LONG, chunk_size=4, chunk_delay=0.05, delay=0.3)])
    q = queue()
    agents = {"live": AgentSpec(model=lm)}
    # written four times a second (not once, the default), so a 2 s reply comes in many pieces
    async with running_worker(temporal_client, store, agents, task_queue=q, live_every=0.25):
        agent = await new(
            "live", store=store, session_id=sid("cli"), executor=executor(temporal_client, q)
        )
        out = _Writes()
        printer = RunPrinter(Console(file=out, width=200, color_system=None))
        async for event in (await agent.run("go")).events():
            printer.handle(event)
        printer.finish()
    receipt = next(i for i, w in enumerate(out.writes) if "✓ stored reply" in w)
    pieces = [w for w in out.writes[:receipt] if w and LONG.find(w) > 0]
    # the reply reached the terminal in many pieces before its receipt, and in full exactly once
    assert len(pieces) >= 3 and printer.updates >= 3
    assert "".join(out.writes[:receipt]).count(LONG.strip()) == 1


def test_the_cli_printer_starts_a_restarted_reply_over() -> None:

    def update(text: str, *, restart: bool = False) -> Event:
        partial = Message(role="assistant", content=[TextContent(text=text)])
        inner = AgentEvent(type="message_update", message=partial, restart=restart)
        return Event(type="agent", session_id="s", agent=inner)

    out = _Writes()
    printer = RunPrinter(Console(file=out, width=200, color_system=None))
    start = AgentEvent(type="message_start", message=Message(role="assistant"))
    printer.handle(Event(type="agent", session_id="s", agent=start))
    for event in (update("Hel"), update("Hello wor"), update("Hi", restart=True), update("Hi!")):
        printer.handle(event)
    text = "".join(out.writes)
    assert text.index("Hello wor") < text.index("↻ the model call was retried")
    assert text.rstrip().endswith("assistant ▸ Hi!")
    assert printer.updates == 4 and text.count("↻") == 1
