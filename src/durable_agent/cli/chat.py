"""``durable-agent chat``: placeholder until the REPL lands."""

from __future__ import annotations

from rich.console import Console

__all__ = ["run_chat"]


async def run_chat(
    console: Console, *, session_id: str, store_spec: str, task_queue: str, agent_name: str
) -> int:
    console.print("chat is not implemented yet")
    return 1
