"""How often a client asks for a run's events: after an answer that caught up with everything the
workflow recorded, the next query waits its poll interval (or for the run's end) instead of
following at once. The immediate follow-up came back empty nearly every time, yet each cost a
workflow activation on the worker and work on the server (the machine a turn runs on is the one
answering these). An answer cut short by its size budget is still followed at once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput

from durable_agent import Reply, ScriptedModel, new, tool
from durable_agent.activities.contracts import EventsAnswer
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, TemporalExecutor
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import assert_receipts_stored, consume, queue, run_id, sid

POLL = 0.2
"""The executor's first poll interval in these tests."""


class _RecordQueries(Interceptor):
    """Every ``events`` query the client sends: when it was sent and what came back."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, int, EventsAnswer]] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        asked = self.asked

        class _Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                sent = time.monotonic()
                answer = await super().query_workflow(input)
                if input.query == "events" and isinstance(answer, EventsAnswer):
                    asked.append((sent, int(input.args[0]), answer))
                return answer

        return _Outbound(next)


@tool
async def slow_step(k: int) -> str:
    """A tool that takes longer than a poll interval, so the client catches up mid-run."""
    await asyncio.sleep(POLL * 2)
    return f"step {k}"


async def test_a_caught_up_answer_is_not_followed_by_an_immediate_query(
    temporal_client: Client,
) -> None:
    recorder = _RecordQueries()
    config = temporal_client.config()
    config["interceptors"] = [*config["interceptors"], recorder]
    client = Client(**config)
    store, q = MemoryStore(), queue()
    calls = [Reply.call("slow_step", {"k": k}, id=f"c{k}") for k in range(1, 4)]
    lm = ScriptedModel([*calls, "done"])
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=[slow_step])}, task_queue=q
    ):
        ex = TemporalExecutor(
            client, task_queue=q, timeouts=FAST, poll_initial=POLL, live_deltas=None
        )
        agent = await new("a", store=store, session_id=sid("cadence"), executor=ex)
        outcome = await consume(await agent.run("go", run_id=run_id()))
    assert outcome.error is None, repr(outcome.error)
    stored = await store.load_entries(agent.session_id)
    assert_receipts_stored(outcome, stored)
    assert outcome.recorded_types().count("turn_start") == 4
    asked = recorder.asked
    caught_up = [
        i
        for i, (_, _, answer) in enumerate(asked[:-1])
        if answer.events and answer.events[-1].position == answer.last_position
    ]
    assert caught_up  # three slow tools: the client caught up while each ran
    for i in caught_up:
        sent, after, _ = asked[i + 1]
        # the wait is at least the poll interval (asyncio's timer may fire a clock tick early)
        assert sent - asked[i][0] >= POLL * 0.9, (i, sent - asked[i][0], after)
    # and every query asked from where the previous answer ended: nothing seen twice
    for (_, _, before), (_, after, _) in itertools.pairwise(asked):
        if before.events:
            assert after == before.events[-1].position
