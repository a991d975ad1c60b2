"""A finished run's result carries its last events: a client that learns of the
end from the result long poll takes the events it has not seen from there, and queries a closed
workflow (which a worker answers only by replaying its whole history) only when the tail does not
reach back far enough."""

from __future__ import annotations

from typing import Any

from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
)

from durable_agent import Reply, ScriptedModel, new, tool
from durable_agent.activities.contracts import EventsAnswer, RunResult, WireEvent, event_to_wire
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.durable.events import Event
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, run_workflow_id
from durable_agent.workflows.event_bodies import (
    CARRY_INLINE_LIMIT,
    RESULT_TAIL_BUDGET,
    BodyTracker,
    encoded_size,
    result_tail,
)
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import assert_receipts_stored, consume, queue, run_id, sid

# -- result_tail, on recorded events ------------------------------------------------------------


def _events(turns: int, text: str = "x") -> list[WireEvent]:
    """agent_start, then per turn: turn_start, a reply's start and end, turn_end; agent_end."""
    agents = [AgentEvent(type="agent_start")]
    for k in range(turns):
        reply = Message(role="assistant", content=[TextContent(text=f"{k} {text}")])
        agents += [
            AgentEvent(type="turn_start"),
            AgentEvent(type="message_start", message=Message(role="assistant")),
            AgentEvent(type="message_end", message=reply),
            AgentEvent(type="turn_end", message=reply),
        ]
    agents.append(AgentEvent(type="agent_end", messages=[]))
    out: list[WireEvent] = []
    tracker = BodyTracker()
    for position, agent in enumerate(agents, start=1):
        event = Event(type="agent", session_id="s", agent=agent)
        tracker.record(out, event_to_wire(event, position), None)
    return out


def test_a_run_of_up_to_two_turns_carries_every_event() -> None:
    for turns in (1, 2):
        events = _events(turns)
        assert result_tail(events, 2) == events


def test_a_longer_run_carries_its_last_two_turns() -> None:
    events = _events(5)
    tail = result_tail(events, 2)
    assert tail[0].agent is not None and tail[0].agent.type == "turn_start"
    assert [w.position for w in tail] == [w.position for w in events[-9:]]


def test_large_bodies_are_left_out_and_the_tail_fits_its_budget() -> None:
    events = _events(2, text="b" * 5000)
    tail = result_tail(events, 2)
    assert all(encoded_size(w) < CARRY_INLINE_LIMIT + 600 for w in tail)
    assert [w.position for w in tail] == [w.position for w in events]
    huge = result_tail(_events(2000), 2000)
    assert sum(encoded_size(w) for w in huge) <= RESULT_TAIL_BUDGET
    assert huge[-1].agent is not None and huge[-1].agent.type == "agent_end"


# -- live: queries counted by a client interceptor ---------------------------------------------


class _CountQueries(Interceptor):
    def __init__(self) -> None:
        self.queries: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        counter = self

        class _Outbound(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                counter.queries.append(input.query)
                return await super().query_workflow(input)

        return _Outbound(next)


def _counting(client: Client) -> tuple[Client, _CountQueries]:
    counter = _CountQueries()
    config = client.config()
    config["interceptors"] = [*config["interceptors"], counter]
    return Client(**config), counter


@tool
async def step(k: int) -> str:
    """One step."""
    return f"step {k}"


async def test_a_client_that_first_looks_after_the_end_needs_no_query(
    temporal_client: Client,
) -> None:
    client, counter = _counting(temporal_client)
    store, q = MemoryStore(), queue()
    lm = ScriptedModel([Reply.call("step", {"k": 1}, id="c1"), "done"])
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=[step])}, task_queue=q
    ):
        # the first look waits for the end (or a minute): the result is all it has
        ex = TemporalExecutor(client, task_queue=q, timeouts=FAST, poll_initial=60.0)
        agent = await new("a", store=store, session_id=sid("tail"), executor=ex)
        rid = run_id()
        outcome = await consume(await agent.run("go", run_id=rid))
        handle = client.get_workflow_handle(
            run_workflow_id(agent.session_id, rid), result_type=RunResult
        )
        result = await handle.result()
        recorded_by_query = await handle.query("events", 0, result_type=EventsAnswer)
    assert outcome.error is None, repr(outcome.error)
    assert counter.queries == ["events"]  # only the test's own, after the stream ended
    assert [w.position for w in result.tail] == [e.position for e in recorded_by_query.events]
    assert outcome.recorded_types() == [w.agent.type for w in result.tail if w.agent]
    stored = await store.load_entries(agent.session_id)
    assert_receipts_stored(outcome, stored)
    assert agent.leaf_id == stored[-1].id
    assert [m.text() for m in outcome.messages] == ["", "step 1", "done"]


async def test_a_client_further_behind_than_the_tail_queries_the_rest(
    temporal_client: Client,
) -> None:
    client, counter = _counting(temporal_client)
    store, q = MemoryStore(), queue()
    calls = [Reply.call("step", {"k": k}, id=f"c{k}") for k in range(1, 4)]
    lm = ScriptedModel([*calls, "done"])
    async with running_worker(
        client, store, {"a": AgentSpec(model=lm, tools=[step])}, task_queue=q
    ):
        ex = TemporalExecutor(client, task_queue=q, timeouts=FAST, poll_initial=60.0)
        agent = await new("a", store=store, session_id=sid("behind"), executor=ex)
        outcome = await consume(await agent.run("go", run_id=run_id()))
    assert outcome.error is None, repr(outcome.error)
    assert counter.queries  # four turns: the tail holds the last two, the query the rest
    types = outcome.recorded_types()
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types.count("turn_start") == 4
    stored = await store.load_entries(agent.session_id)
    assert_receipts_stored(outcome, stored)
    assert [r.id for r in outcome.receipts()] == [e.id for e in stored]
