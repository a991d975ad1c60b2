"""Benchmark: the in-process durable agent's overhead per turn (target: < 1 ms).

A turn is ``await (await agent.run(q)).wait()`` on a ``MemoryStore`` with a zero-latency
``ScriptedModel``. The same turns are also driven through the bare inner loop (a ``ModelLoop`` on
the same model, handed the history the durable agent would compute), measured the same way; the
difference is what durability adds: stamping, persisting input and each message, the receipts,
the stream, the path walk and model view, the factory call.

Scenarios, each ``--turns`` consecutive turns on one session (the history grows):

- **text**: one user message, one assistant reply;
- **tool**: one user message, an assistant tool call, the tool result, the final reply.

Figures: p50 / p95 / mean per turn for the durable agent and the bare loop, and the overhead
(durable minus bare, per statistic). The first ``--warmup`` turns are excluded.

Run: ``.venv/bin/python bench/agent_bench.py`` (``--turns 2000``, ``--quick`` for 300 turns).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from durable_agent import model, new
from durable_agent.agent import AgentOptions, ModelLoop
from durable_agent.ai import Message, ModelRequest, Reply, ScriptedModel, tool, user_message
from durable_agent.stores import MemoryStore

TARGET_MS = 1.0


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def responder(with_tool: bool) -> Callable[[ModelRequest], Reply]:
    """Zero latency: a tool call when the last message is the user's, else a text reply."""

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1] if request.messages else None
        if with_tool and last is not None and last.role == "user":
            return Reply.call("lookup", {"key": "k"}, id=f"call-{len(request.messages)}")
        return Reply(text="The answer is forty-two, as always.")

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


async def timed(turns: int, turn: Callable[[int], Awaitable[None]]) -> list[int]:
    samples = []
    for i in range(turns):
        t0 = time.perf_counter_ns()
        await turn(i)
        samples.append(time.perf_counter_ns() - t0)
    return samples


async def durable_turns(turns: int, with_tool: bool) -> list[int]:
    lm = ScriptedModel(responder(with_tool))
    tools = (lookup,) if with_tool else ()
    agent = await new(model(lm), store=MemoryStore(), session_id="bench", tools=tools)

    async def turn(i: int) -> None:
        await (await agent.run(f"question {i}")).wait()

    return await timed(turns, turn)


async def bare_turns(turns: int, with_tool: bool) -> list[int]:
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

    return await timed(turns, turn)


async def scenario(name: str, turns: int, warmup: int, with_tool: bool) -> Stats:
    durable = Stats.of((await durable_turns(turns + warmup, with_tool))[warmup:])
    bare = Stats.of((await bare_turns(turns + warmup, with_tool))[warmup:])
    overhead = durable.minus(bare)
    print(f"{name} ({turns} turns after {warmup} warm-up):")
    print(durable.row("durable agent"))
    print(bare.row("bare loop"))
    print(overhead.row("overhead"))
    return overhead


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="300 turns")
    args = parser.parse_args()
    turns = 300 if args.quick else args.turns
    print("durable agent overhead per turn (MemoryStore, zero-latency ScriptedModel)")
    results = [
        await scenario("text turn", turns, args.warmup, with_tool=False),
        await scenario("one-tool turn", turns, args.warmup, with_tool=True),
    ]
    worst = max(r.p50 for r in results)
    verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
    print(f"target: overhead p50 < {TARGET_MS:.1f} ms per turn -> {verdict} (worst {worst:.3f} ms)")


if __name__ == "__main__":
    asyncio.run(main())
