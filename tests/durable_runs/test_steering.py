"""Messages into a running run on every executor: a steer lands after the current turn's tool
results, a follow-up when the loop would stop, each stored before anyone is told
(docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio

import pytest

from durable_agent import MessageEntry, RunNotAcceptingError, ScriptedModel
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.session import Store
from tests.durable_runs.support import kinds
from tests.durable_runs.test_approvals import Reader, shape, stored
from tests.support.harness import Harness

STARTED = asyncio.Event()
RELEASE = asyncio.Event()


@tool
async def step(n: int) -> str:
    """A step that waits for the test to let it finish."""
    STARTED.set()
    await RELEASE.wait()
    return f"step {n} done"


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTED.clear()
    RELEASE.clear()


def call(n: int) -> ToolCall:
    return ToolCall(id=f"s{n}", name="step", arguments={"n": n})


async def test_steer_lands_between_two_tool_calls(harness: Harness, store: Store) -> None:
    lm = ScriptedModel([Reply(tool_calls=[call(1)]), Reply(tool_calls=[call(2)]), "done"])
    agent = await harness.open(lm, store=store, tools=[step])
    stream = await agent.run("do two steps")
    reader = Reader(stream)
    await asyncio.wait_for(STARTED.wait(), 30)
    sending = asyncio.ensure_future(stream.send("also say hello"))
    await reader.until("tool_execution_start")
    RELEASE.set()
    steer = await asyncio.wait_for(sending, 30)
    assert isinstance(steer, MessageEntry) and steer.message.text() == "also say hello"
    events = await reader.done()
    names = kinds(events, updates=False)
    first_end = names.index("turn_end")
    assert names[first_end + 1 : first_end + 3] == ["input_delivered", "turn_start"]
    delivered = next(e for e in events if e.agent and e.agent.type == "input_delivered")
    assert delivered.entries == [steer]
    assert shape(stored(agent)) == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    # the model saw the steer on its next call
    assert lm.requests[1].messages[-1].text() == "also say hello"


async def test_follow_up_runs_when_the_loop_would_stop(harness: Harness, store: Store) -> None:
    lm = ScriptedModel([Reply(tool_calls=[call(1)]), "first answer", "second answer"])
    agent = await harness.open(lm, store=store, tools=[step])
    stream = await agent.run("one step")
    reader = Reader(stream)
    await asyncio.wait_for(STARTED.wait(), 30)
    sending = asyncio.ensure_future(stream.send("and then?", when="at_end"))
    await asyncio.sleep(0)  # let the send reach the run before the step finishes
    RELEASE.set()
    follow = await asyncio.wait_for(sending, 30)
    events = await reader.done()
    texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert texts[3:] == ["first answer", "and then?", "second answer"]
    assert follow.id == stored(agent)[4].id
    names = kinds(events, updates=False)
    delivered = names.index("input_delivered")
    assert names[delivered - 1] == "turn_end" and names[delivered + 1] == "turn_start"


async def test_send_to_an_ended_run_is_refused(harness: Harness, store: Store) -> None:
    agent = await harness.open(["hi"], store=store)
    stream = await agent.run("hello")
    await asyncio.wait_for(stream.wait(), 30)
    with pytest.raises(RunNotAcceptingError):
        await stream.send("too late")
    assert len(stored(agent)) == 2
