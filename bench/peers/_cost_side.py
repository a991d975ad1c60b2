"""One side of ``bench/cost_bench.py`` in its own process: a worker, or a client that holds a
conversation. ``cost_bench.py`` starts one of each per workload and talks to them over stdin and
stdout, one line at a time:

* ``worker``: prints ``ready <json>`` once it polls its task queue; answers every ``mark`` line
  with ``mark <json>`` (its CPU seconds so far and the queries its own client made); exits at
  end of input.
* ``client``: holds a warm-up conversation (5 turns, no model latency), prints ``warm <json>``,
  waits for a ``go`` line, holds the measured conversation and prints ``done <json>`` (its CPU
  seconds over that conversation, wall time, queries made, live deltas seen); exits at end of
  input.

Both sides run the ``bench/peers`` code: durable-agent's ``create_worker`` + ``TemporalExecutor``
with the scripted model and ``lookup`` tool of ``temporal.py``; Pydantic AI's ``PaiTurn`` workflow
of ``_pai_workflow.py`` (``TemporalDurability``, one workflow per turn, history passed in). The
model latency ``L`` applies to every model call (a tool turn has two) of the measured
conversation: durable-agent's scripted model streams its reply in ``round(20 L)`` deltas spread
over ``L`` seconds (about 20 tokens a second; at 0 s it streams at once, as ``temporal.py``);
Pydantic AI's ``FunctionModel`` (not streamed: the peer's activity returns the whole reply)
sleeps ``L``. Replies longer than ``TEXT`` are padded to 4 characters a delta, equally on both
sides. ``--mode dark`` turns durable-agent's live deltas off on both sides (the model streams all
the same). ``--side pai --mode streamed`` runs ``_pai_workflow.PaiStreamedTurn``: the agent with
an event stream handler, whose model streams the same deltas over ``L`` as durable-agent's (the
worker's ``mark`` then also says how many model-stream events the handler saw). ``cost_bench.py``
puts the tree under test's ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import math
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: F401  (puts the repository and bench/ on sys.path)
import _pai_workflow
from _common import TEXT
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from pydantic_ai.messages import ModelRequest as PaiRequest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import DeltaToolCall
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    SignalWorkflowInput,
    StartWorkflowUpdateInput,
    WorkflowUpdateHandle,
)
from temporalio.worker import Worker

import durable_agent
import temporal
from durable_agent import new
from durable_agent.ai import ModelRequest, Reply, ScriptedModel
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker

PROFILE = os.environ.get("COST_BENCH_PROFILE")
"""A directory: each process profiles its measured part (cProfile, the event loop's thread) into
``<dir>/<role>-<side>-<pid>.prof`` (what its CPU per turn goes to)."""

WARMUP = "warmup "
"""Prefix of the warm-up conversation's prompts: its model calls take no time."""
WARMUP_TURNS = 5
DELTAS_PER_SECOND = 20


def deltas(latency: float) -> int:
    return max(1, round(DELTAS_PER_SECOND * latency))


def padded(text: str, latency: float) -> str:
    """``text``, padded to 4 characters a delta when the model streams longer than it lasts."""
    want = 4 * deltas(latency) if latency else 0
    return text if len(text) >= want else (text + " " + TEXT * (want // len(TEXT) + 1))[:want]


class RpcCount(Interceptor):
    """Counts the billable calls this process's client made that succeeded (as the server's
    ``action`` metric counts only successful calls): queries by name, signals, updates."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self.counts)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counts: Counter[str]) -> None:
        super().__init__(next)
        self.counts = counts

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        result = await super().query_workflow(input)
        self.counts[f"query:{input.query}"] += 1
        return result

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await super().signal_workflow(input)
        self.counts[f"signal:{input.signal}"] += 1

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        handle = await super().start_workflow_update(input)
        self.counts[f"update:{input.update}"] += 1
        return handle


# -- the models ---------------------------------------------------------------------------------


def ours_model(latency: float) -> ScriptedModel:
    """``temporal.respond``'s replies, streamed over ``latency`` seconds outside the warm-up."""

    def respond(request: ModelRequest) -> Reply:
        reply = temporal.respond(request)
        if not latency or request.messages[0].text().startswith(WARMUP):
            return reply
        text = padded(reply.text, latency)
        size = math.ceil(len(text) / deltas(latency))
        pauses = math.ceil(len(text) / size) + sum(
            math.ceil(len(json.dumps(c.arguments)) / (size * 4)) for c in reply.tool_calls
        )
        update = {"text": text, "chunk_size": size, "chunk_delay": latency / pauses}
        return reply.model_copy(update=update)

    return ScriptedModel(respond)


def pai_model(latency: float) -> None:
    """Gives ``_pai_workflow``'s ``FunctionModel``s (the instances its activities call) the
    latency: ``_pai_workflow.respond``'s reply after ``latency`` seconds outside the warm-up, or
    (the streamed agent's) streamed over ``latency`` seconds as ``ours_model`` streams it."""
    model = _pai_workflow.agent.model
    base = _pai_workflow.respond

    def warmup(messages: list[Any]) -> bool:
        first = messages[0]
        return isinstance(first, PaiRequest) and any(
            isinstance(p, UserPromptPart) and str(p.content).startswith(WARMUP) for p in first.parts
        )

    async def respond(messages: list[Any], info: Any) -> ModelResponse:
        response = base(messages, info)
        if not latency or warmup(messages):
            return response
        await asyncio.sleep(latency)
        parts = [
            TextPart(padded(p.content, latency)) if isinstance(p, TextPart) else p
            for p in response.parts
        ]
        return ModelResponse(parts=parts, usage=response.usage)

    async def stream(messages: list[Any], info: Any) -> Any:
        response = base(messages, info)
        if not latency or warmup(messages):
            async for item in _pai_workflow.stream(messages, info):
                yield item
            return
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        text = padded(text, latency)
        size = math.ceil(len(text) / deltas(latency))
        calls = [(i, p) for i, p in enumerate(response.parts) if isinstance(p, ToolCallPart)]
        arg_pauses = [math.ceil(len(c.args_as_json_str()) / (size * 4)) for _, c in calls]
        pause = latency / (math.ceil(len(text) / size) + sum(arg_pauses))
        for start in range(0, len(text), size):
            await asyncio.sleep(pause)
            yield text[start : start + size]
        for (i, call), pauses in zip(calls, arg_pauses, strict=True):
            await asyncio.sleep(pause * pauses)
            args = call.args_as_json_str()
            yield {i: DeltaToolCall(call.tool_name, args, tool_call_id=call.tool_call_id)}

    model.function = respond  # type: ignore[union-attr]
    _pai_workflow.streamed_agent.model.stream_function = stream  # type: ignore[union-attr]


# -- the processes ------------------------------------------------------------------------------


class Profile:
    """``COST_BENCH_PROFILE``'s profile of one process: on at the first toggle, written at the
    second (nothing without the variable)."""

    def __init__(self, role: str, side: str) -> None:
        self.profile = cProfile.Profile() if PROFILE else None
        self.name = f"{role}-{side}-{os.getpid()}.prof"
        self.on = False
        self.cpu = (0.0, 0.0)

    def toggle(self) -> None:
        if self.profile is None or PROFILE is None:
            return
        if not self.on:
            self.cpu = (time.process_time(), time.thread_time())
            self.profile.enable()
        else:
            self.profile.disable()
            self.profile.dump_stats(str(Path(PROFILE) / self.name))
            process, loop = time.process_time() - self.cpu[0], time.thread_time() - self.cpu[1]
            cpu = {"process": process, "loop": loop}
            (Path(PROFILE) / f"{self.name}.json").write_text(json.dumps(cpu))
        self.on = not self.on


async def line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def say(tag: str, payload: dict[str, Any]) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


async def worker(args: argparse.Namespace) -> None:
    counter = RpcCount()
    w: Worker
    if args.side == "ours":
        client = await connect(args.address, interceptors=[counter])
        w = await create_worker(
            client,
            task_queue=args.queue,
            store=FileStore(args.store),
            agents={"chat": AgentSpec(model=ours_model(args.latency), tools=(temporal.lookup,))},
            live_deltas=None if args.mode == "dark" else "auto",
            **({} if args.live_every is None else {"live_every": args.live_every}),
        )
    else:
        pai_model(args.latency)
        client = await Client.connect(
            args.address, plugins=[PydanticAIPlugin()], interceptors=[counter]
        )
        workflows = [_pai_workflow.PaiTurn, _pai_workflow.PaiStreamedTurn]
        w = Worker(client, task_queue=args.queue, workflows=workflows)
    profile = Profile("worker", args.side)
    async with w:
        say("ready", {"durable_agent": durable_agent.__file__, "pid": os.getpid()})
        while (text := await line()) != "":
            if text.strip() == "mark":
                profile.toggle()
                rpcs, handled = dict(counter.counts), _pai_workflow.HANDLED[0]
                say("mark", {"cpu": time.process_time(), "rpcs": rpcs, "handled": handled})


async def conversation_ours(
    executor: TemporalExecutor, store: FileStore, prefix: str, turns: int, mode: str
) -> tuple[int, Callable[[], Awaitable[None]]]:
    """Turns of one durable-agent conversation: the live deltas (``message_update``) seen, and
    the check that the session holds every turn (called after the measured part: the peer's
    own check costs nothing, it counts the history it already holds)."""
    agent = await new("chat", store=store, executor=executor)
    updates = 0
    for i in range(1, turns + 1):
        stream = await agent.run(f"{prefix}question {i:04d} {TEXT}", run_id=f"r{i:04d}")
        if mode == "wait":
            await stream.wait()
            continue
        async for event in stream.events():
            updates += event.agent is not None and event.agent.type == "message_update"

    async def check() -> None:
        n = len(await store.load_entries(agent.session_id))
        if n != temporal.messages_after(turns):
            raise RuntimeError(f"durable-agent stored {n} entries after {turns} turns")

    return updates, check


async def conversation_pai(
    client: Client, queue: str, prefix: str, turns: int, tag: str, mode: str
) -> int:
    history: list[Any] = []
    turn = _pai_workflow.PaiStreamedTurn.run if mode == "streamed" else _pai_workflow.PaiTurn.run
    for i in range(1, turns + 1):
        history = await client.execute_workflow(
            turn,
            args=[f"{prefix}question {i:04d} {TEXT}", history],
            id=f"{queue}-{tag}-{i:04d}",
            task_queue=queue,
            execution_timeout=timedelta(minutes=30),
        )
    if len(history) != temporal.messages_after(turns):
        raise RuntimeError(f"Pydantic AI returned {len(history)} messages after {turns} turns")
    return 0


async def _checked() -> None:
    """Pydantic AI's conversation checked its history as it ended (a count, free)."""


async def client(args: argparse.Namespace) -> None:
    counter = RpcCount()
    if args.side == "ours":
        c = await connect(args.address, interceptors=[counter])
        store = FileStore(args.store)
        executor = TemporalExecutor(
            c,
            task_queue=args.queue,
            execution_timeout=timedelta(minutes=30),
            live_deltas=None if args.mode == "dark" else "auto",
        )

        async def talk(prefix: str, turns: int) -> tuple[int, Callable[[], Awaitable[None]]]:
            return await conversation_ours(executor, store, prefix, turns, args.mode)
    else:
        c = await Client.connect(args.address, plugins=[PydanticAIPlugin()], interceptors=[counter])

        async def talk(prefix: str, turns: int) -> tuple[int, Callable[[], Awaitable[None]]]:
            tag = prefix.strip() or "turn"
            return await conversation_pai(c, args.queue, prefix, turns, tag, args.mode), _checked

    await (await talk(WARMUP, WARMUP_TURNS))[1]()
    say("warm", {"durable_agent": durable_agent.__file__, "pid": os.getpid()})
    if (await line()).strip() != "go":
        return
    counter.counts.clear()
    profile = Profile("client", args.side)
    profile.toggle()
    cpu0, t0 = time.process_time(), time.perf_counter()
    updates, check = await talk("", args.turns)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    profile.toggle()
    await check()
    say("done", {"cpu": cpu, "wall": wall, "rpcs": dict(counter.counts), "updates": updates})
    await line()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=["worker", "client"])
    parser.add_argument("--side", choices=["ours", "pai"], required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--mode", choices=["events", "wait", "dark", "streamed"], default="events")
    parser.add_argument("--live-every", type=float, help="our worker's live_every (seconds)")
    args = parser.parse_args()
    asyncio.run(worker(args) if args.role == "worker" else client(args))


if __name__ == "__main__":
    rc = 0
    try:
        main()
    except BaseException:
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # skip interpreter teardown (the Temporal SDK can abort at exit)
