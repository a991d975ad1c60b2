"""Benchmark: the in-process durable agent's overhead per turn (target: < 1 ms).

A turn is ``await (await agent.run(q)).wait()`` on a ``MemoryStore`` with a zero-latency
``ScriptedModel``. The same turns are also driven through the bare inner loop (a ``ModelLoop`` on
the same model, handed the history the durable agent would compute), measured the same way; the
difference is what durability adds: stamping, persisting input and each message, the receipts,
the stream, the path walk and model view, the factory call.

Scenarios, each ``--turns`` turns, either all on one session (the history grows to 2 or 4 entries
per turn) or round-robin over 100 sessions (a typical session length):

- **text turn**: one user message, one assistant reply;
- **one-tool turn**: one user message, an assistant tool call, the tool result, the final reply.

Durable and bare turns alternate, so each pair sees the same load and history length. Figures:
p50 / p95 / mean per turn for the durable agent and the bare loop, the overhead (the per-pair
difference) and the overhead over the last 100 turns (the longest history). The first
``--warmup`` turns are excluded.

Run: ``.venv/bin/python bench/agent_bench.py`` (``--turns 2000``, ``--quick`` for 300 turns).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from durable_agent import model, new
from durable_agent.agent import AgentOptions, ModelLoop
from durable_agent.ai import (
    Message,
    ModelRequest,
    Reply,
    ScriptedModel,
    ToolCall,
    Usage,
    tool,
    user_message,
)
from durable_agent.stores import MemoryStore

TARGET_MS = 1.0


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


USAGE = Usage(input=100, output=10)
"""Given, so the ScriptedModel does not estimate usage from the whole request (that would add an
O(history) cost to both sides that no real, zero-latency model has)."""


def responder(with_tool: bool) -> Callable[[ModelRequest], Reply]:
    """Zero latency: a tool call when the last message is the user's, else a text reply."""

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1] if request.messages else None
        if with_tool and last is not None and last.role == "user":
            call = ToolCall(
                id=f"call-{len(request.messages)}", name="lookup", arguments={"key": "k"}
            )
            return Reply(tool_calls=[call], usage=USAGE)
        return Reply(text="The answer is forty-two, as always.", usage=USAGE)

    return respond


@dataclass(frozen=True)
class Stats:
    p50: float
    p95: float
    mean: float

    @classmethod
    def of(cls, samples_ns: list[int]) -> Stats:
        ms = sorted(s / 1e6 for s in samples_ns)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        return cls(statistics.median(ms), p95, statistics.fmean(ms))

    def minus(self, other: Stats) -> Stats:
        return Stats(self.p50 - other.p50, self.p95 - other.p95, self.mean - other.mean)

    def row(self, label: str) -> str:
        return (
            f"  {label:<14} p50 {self.p50:7.3f} ms   p95 {self.p95:7.3f} ms"
            f"   mean {self.mean:7.3f} ms"
        )


Turn = Callable[[int], Awaitable[None]]


async def durable_turn(with_tool: bool) -> Turn:
    lm = ScriptedModel(responder(with_tool))
    tools = (lookup,) if with_tool else ()
    agent = await new(model(lm), store=MemoryStore(), tools=tools)

    async def turn(i: int) -> None:
        await (await agent.run(f"question {i}")).wait()

    return turn


def bare_turn(with_tool: bool) -> Turn:
    """The bare loop doing the same turns, handed the history the durable agent would build."""
    lm = ScriptedModel(responder(with_tool))
    base = AgentOptions(tools=(lookup,) if with_tool else ())
    history: list[Message] = []

    async def turn(i: int) -> None:
        prompt = user_message(f"question {i}")
        loop = ModelLoop(lm, base.model_copy(update={"history": list(history)}))
        produced = await loop.run([prompt]).wait()
        await loop.aclose()
        history.append(prompt)
        history.extend(produced)

    return turn


async def measure(turns: int, pairs: list[tuple[Turn, Turn]]) -> tuple[list[int], list[int]]:
    """Alternate durable and bare turns, so both see the same machine load and session length.
    ``pairs`` holds one (durable, bare) pair per session; turns go round-robin over them."""
    durable_ns: list[int] = []
    bare_ns: list[int] = []
    for i in range(turns):
        durable, bare = pairs[i % len(pairs)]
        t0 = time.perf_counter_ns()
        await durable(i)
        t1 = time.perf_counter_ns()
        await bare(i)
        t2 = time.perf_counter_ns()
        durable_ns.append(t1 - t0)
        bare_ns.append(t2 - t1)
    return durable_ns, bare_ns


async def scenario(
    name: str, turns: int, warmup: int, with_tool: bool, sessions: int
) -> tuple[Stats, Stats]:
    pairs = [(await durable_turn(with_tool), bare_turn(with_tool)) for _ in range(sessions)]
    durable_ns, bare_ns = await measure(turns + warmup, pairs)
    durable_ns, bare_ns = durable_ns[warmup:], bare_ns[warmup:]
    durable, bare = Stats.of(durable_ns), Stats.of(bare_ns)
    paired = Stats.of([d - b for d, b in zip(durable_ns, bare_ns, strict=True)])
    tail = Stats.of([d - b for d, b in zip(durable_ns[-100:], bare_ns[-100:], strict=True)])
    per_session = (turns + warmup) // sessions
    print(f"{name}: {turns} turns after {warmup} warm-up, {sessions} session(s) of ~{per_session}")
    print(durable.row("durable agent"))
    print(bare.row("bare loop"))
    print(paired.row("overhead"))
    print(tail.row("  last 100"))
    return paired, tail


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="300 turns")
    args = parser.parse_args()
    turns = 300 if args.quick else args.turns
    print("durable agent overhead per turn (MemoryStore, zero-latency ScriptedModel)")
    print("overhead = durable minus bare, per paired turn; 'last 100' = the longest history")
    worst = 0.0
    for name, with_tool in (("text turn", False), ("one-tool turn", True)):
        for sessions in (100, 1):
            overhead, _ = await scenario(name, turns, args.warmup, with_tool, sessions)
            worst = max(worst, overhead.p50)
    # On one long session the durable side keeps far more live objects (log, index, views, the
    # store's copies), so the cyclic GC's full collections cost more; without GC the overhead
    # stays flat as the history grows.
    gc.collect()
    gc.disable()
    try:
        print("--- cyclic GC disabled ---")
        for name, with_tool in (("text turn", False), ("one-tool turn", True)):
            await scenario(name, turns, args.warmup, with_tool, 1)
    finally:
        gc.enable()
    verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
    print(f"target: overhead p50 < {TARGET_MS:.1f} ms per turn -> {verdict} (worst {worst:.3f} ms)")


if __name__ == "__main__":
    asyncio.run(main())
