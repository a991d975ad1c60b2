"""Messages into a running run on every executor: a steer lands after the current turn's tool
results, a follow-up when the loop would stop, each stored before anyone is told
(docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durable_agent import (
    Agent,
    InvalidRunInputError,
    MessageEntry,
    PayloadTooLargeError,
    RunNotAcceptingError,
    ScriptedModel,
    meta,
)
from durable_agent.activities.run_contracts import RunState
from durable_agent.ai import Message, Reply, TextContent, ToolCall, tool
from durable_agent.durable.limits import PAYLOAD_LIMIT
from durable_agent.session import Store
from durable_agent.stores import MemoryStore
from tests.durable_runs.support import kinds
from tests.durable_runs.test_approvals import Reader, shape, stored
from tests.support.harness import Harness
from tests.support.polling import eventually

STARTED = asyncio.Event()
RELEASE = asyncio.Event()


@tool
async def step(n: int) -> str:
    """A step that waits for the test to let it finish."""
    STARTED.set()
    await RELEASE.wait()
    return f"step {n} done"


async def queued(agent: Agent, n: int = 1, client: Any = None) -> None:
    """Until the live run holds ``n`` messages: its engine's inbox in process, its ``state()``
    query on Temporal."""

    async def probe() -> bool:
        engine = agent.state.live_run
        if engine is not None:
            return len(engine.inbox.messages) >= n
        rid = agent.state.live_run_id
        if not rid or client is None:
            return False
        from durable_agent.workflows import run_workflow_id

        handle = client.get_workflow_handle(run_workflow_id(agent.session_id, rid))
        state: RunState = await handle.query("state", result_type=RunState)
        return state.queued_inputs >= n

    await eventually(probe, within=30, what=f"{n} queued message(s)")


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
    await queued(agent, client=getattr(harness, "client", None))  # held before the step ends
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
    await queued(agent, client=getattr(harness, "client", None))  # held before the step ends
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


async def test_a_message_sent_the_moment_the_run_starts_is_delivered(
    harness: Harness, store: Store
) -> None:
    """``stream.send`` right after ``run()`` returned, before the run has loaded its session
    (in process: before its engine exists), is queued and delivered, as on Temporal; in
    process it was refused, 'the run has not started or has ended'."""
    agent = await harness.open(["first", "second"], store=store)
    stream = await agent.run("hello")
    follow = await stream.send("and then?", when="at_end")  # no task in between
    await asyncio.wait_for(stream.wait(), 30)
    texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert texts == ["hello", "first", "and then?", "second"]
    assert follow == stored(agent)[2]


async def test_sixteen_queued_then_refused_and_all_delivered_in_order() -> None:
    """In process (the queue bound; on Temporal each queued message is an update in flight)."""
    from durable_agent import model, new

    lm = ScriptedModel([Reply(tool_calls=[call(1)]), *[f"answer {i}" for i in range(40)]])
    agent = await new(model(lm), tools=(step,))
    stream = await agent.run("go")
    await asyncio.wait_for(STARTED.wait(), 30)
    sends = [asyncio.ensure_future(stream.send(f"m{i}", when="at_end")) for i in range(16)]
    await queued(agent, 16)
    with pytest.raises(RunNotAcceptingError):
        await stream.send("one too many")
    RELEASE.set()
    delivered = await asyncio.wait_for(asyncio.gather(*sends), 30)
    await asyncio.wait_for(stream.wait(), 30)
    users = [e for e in stored(agent) if isinstance(e, MessageEntry) and e.message.role == "user"]
    assert [u.message.text() for u in users[1:]] == [f"m{i}" for i in range(16)]
    assert [d.id for d in delivered] == [u.id for u in users[1:]]


async def test_agent_level_async_predicate_decides_which_calls_wait() -> None:
    from durable_agent import model, new

    async def only_big(c: ToolCall) -> bool:
        n: int = c.arguments.get("n", 0)
        return n > 1

    lm = ScriptedModel([Reply(tool_calls=[call(1), call(2)]), "done"])
    RELEASE.set()
    agent = await new(model(lm), tools=(step,), approval=only_big)
    stream = await agent.run("two steps")
    reader = Reader(stream)
    requested = await reader.until("approval_requested")
    assert [getattr(e, "tool_call_id", "") for e in requested.entries or []] == ["s2"]
    await agent.decide("s2", False)
    await reader.done()
    texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert texts[2:4] == ["step 1 done", "tool call denied"]


async def test_a_run_holding_a_message_does_not_park_in_process() -> None:
    """In process (the Temporal twin is in tests/temporal/test_approvals.py): when
    ``approval_wait`` runs out while the run holds a message, the run keeps waiting for the
    decision instead of parking, then delivers the message after the turn's results."""
    from durable_agent import model, new
    from tests.durable_runs.test_approvals import email, send_email

    lm = ScriptedModel([Reply(tool_calls=[email()]), "sent it, and noted"])
    agent = await new(model(lm), tools=(send_email,), approval_wait=1.0)
    stream = await agent.run("mail bob")
    reader = Reader(stream)
    await reader.until("approval_requested")
    engine = agent.state.live_run
    assert engine is not None and engine.gate is not None
    gate = engine.gate
    waited_on: list[float | None] = []
    rewaited = asyncio.Event()
    first_wait = gate.wait

    async def wait(ready: Any, seconds: float | None) -> bool:
        # only called again once the first wait ran out with the message held
        waited_on.append(seconds)
        rewaited.set()
        return await first_wait(ready, seconds)

    gate.wait = wait  # type: ignore[method-assign]
    sending = asyncio.ensure_future(stream.send("cc alice too"))
    await queued(agent)
    ended = asyncio.ensure_future(stream.wait())
    done, _ = await asyncio.wait(
        {ended, asyncio.ensure_future(rewaited.wait())},
        timeout=30,
        return_when=asyncio.FIRST_COMPLETED,
    )
    assert ended not in done, "the run parked while it held a message"
    assert waited_on == [None]  # past approval_wait: no limit while a message waits
    assert agent.running and engine.status == "awaiting_approval"
    await agent.decide("c1", True)
    delivered = await asyncio.wait_for(sending, 30)
    await asyncio.wait_for(ended, 30)
    assert shape(stored(agent)) == [
        "user",
        "assistant",
        "approval_request",
        "approval_decision",
        "tool_result",
        "user",
        "assistant",
    ]
    assert stored(agent)[5].id == delivered.id
    assert stream.pending == []


def give_up_on_arrival(agent: Agent, waiter: list[asyncio.Future[Any]]) -> None:
    """Cancel ``waiter[0]`` (a sender or decider) the moment its mail reaches the live run's
    inbox: it stops waiting (a timeout, a closed request) with its mail accepted."""
    engine = agent.state.live_run
    assert engine is not None
    arrived = engine.inbox.on_change

    def give_up() -> None:
        arrived()
        waiter[0].cancel()

    engine.inbox.on_change = give_up


async def test_a_sender_that_stops_waiting_leaves_the_run_going() -> None:
    """In process: a sender cancelled once its message was accepted (``wait_for`` timing out)
    neither loses the message (an accepted message is always delivered) nor fails the run."""
    from durable_agent import model, new

    lm = ScriptedModel([Reply(tool_calls=[call(1)]), "answer"])
    agent = await new(model(lm), tools=(step,))
    stream = await agent.run("go")
    await asyncio.wait_for(STARTED.wait(), 30)
    sender: list[asyncio.Future[Any]] = []
    give_up_on_arrival(agent, sender)
    sender.append(asyncio.ensure_future(stream.send("steer")))
    with pytest.raises(asyncio.CancelledError):
        await sender[0]
    RELEASE.set()
    await asyncio.wait_for(stream.wait(), 30)
    texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert texts == ["go", "", "step 1 done", "steer", "answer"]
    assert [e.id for e in await agent.store.load_entries(agent.session_id)] == [
        e.id for e in stored(agent)
    ]


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("  \n ", InvalidRunInputError),
        (MessageEntry(message=Message(role="user", content=[])), InvalidRunInputError),
        ("x" * (PAYLOAD_LIMIT + 1), PayloadTooLargeError),
    ],
    ids=["blank", "no-content", "oversized"],
)
async def test_a_blank_or_oversized_message_is_refused_before_it_is_queued(
    harness: Harness, message: str | MessageEntry, refused: type[Exception]
) -> None:
    """As the HTTP API refuses them: a blank message would be stored and the model called on
    it; one over the payload limit would fail the run storing it (on Temporal)."""
    lm = ScriptedModel([Reply(tool_calls=[call(1)]), "done", "never"])
    agent = await harness.open(lm, store=MemoryStore(), tools=[step])
    stream = await agent.run("one step")
    await asyncio.wait_for(STARTED.wait(), 30)
    with pytest.raises(refused):  # at once (accepted, it would wait for the step)
        await asyncio.wait_for(stream.send(message, when="at_end"), 30)
    sending = asyncio.ensure_future(stream.send("then this", when="at_end"))
    await queued(agent, client=getattr(harness, "client", None))  # the refused one held nothing
    RELEASE.set()
    await asyncio.wait_for(sending, 30)
    await asyncio.wait_for(stream.wait(), 30)
    texts = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert texts == ["one step", "", "step 1 done", "done", "then this", "never"]


async def test_a_meta_message_and_one_of_two_parts_are_delivered_as_sent(harness: Harness) -> None:
    """Not plain text: on Temporal the ``send`` update carries them as a run input, which the
    run must read back as the message it is."""
    lm = ScriptedModel([Reply(tool_calls=[call(1)]), "done"])
    agent = await harness.open(lm, store=MemoryStore(), tools=[step])
    stream = await agent.run("one step")
    await asyncio.wait_for(STARTED.wait(), 30)
    parts = Message(role="user", content=[TextContent(text="a"), TextContent(text="b")])
    client = getattr(harness, "client", None)
    sending = [asyncio.ensure_future(stream.send(meta("the user is on a phone")))]
    await queued(agent, 1, client=client)  # two updates at once reach the run in either order
    sending.append(asyncio.ensure_future(stream.send(MessageEntry(message=parts))))
    await queued(agent, 2, client=client)
    RELEASE.set()
    note, two = await asyncio.wait_for(asyncio.gather(*sending), 30)
    await asyncio.wait_for(stream.wait(), 30)
    assert isinstance(note, MessageEntry) and note.meta
    assert note.message.text() == "the user is on a phone"
    assert isinstance(two, MessageEntry) and two.message.content == parts.content
    assert [e.id for e in stored(agent)][3:5] == [note.id, two.id]
    assert [m.text() for m in lm.requests[1].messages[-2:]] == ["the user is on a phone", "ab"]


async def test_a_run_a_follow_up_hook_goes_on_with_still_takes_messages() -> None:
    """In process, a ``follow_up`` hook that goes on where the loop would stop: a message sent
    while the turns it started run is delivered at their end. Before, the inbox had closed
    when it found nothing at that stop, so every later message was refused, 'it has ended',
    though the run went on."""
    from collections.abc import Sequence

    from durable_agent import Hooks, model, new
    from durable_agent.ai import user_message

    nudged = False

    def follow_up(produced: Sequence[Message]) -> list[Message] | None:
        nonlocal nudged
        if nudged:
            return None
        nudged = True
        return [user_message("go on")]

    lm = ScriptedModel(["first answer", Reply(tool_calls=[call(1)]), "stepped", "last answer"])
    agent = await new(model(lm), tools=(step,), hooks=Hooks(follow_up=follow_up))
    stream = await agent.run("begin")
    await asyncio.wait_for(STARTED.wait(), 30)  # in the turn the hook started
    sending = asyncio.ensure_future(stream.send("and then?", when="at_end"))
    await queued(agent)
    RELEASE.set()
    delivered = await asyncio.wait_for(sending, 30)
    await asyncio.wait_for(stream.wait(), 30)
    said = [e.message.text() for e in stored(agent) if isinstance(e, MessageEntry)]
    assert said == [
        "begin",
        "first answer",
        "go on",
        "",
        "step 1 done",
        "stepped",
        "and then?",
        "last answer",
    ]
    assert delivered.id == stored(agent)[6].id
