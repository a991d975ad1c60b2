"""Model failures in a run: retried attempts store nothing, a final failure fails the run."""

from __future__ import annotations

import pytest

from durable_agent import (
    Event,
    ModelError,
    PersistError,
    model,
    new,
)
from durable_agent.ai import (
    Reply,
    RetryPolicy,
    ScriptedModel,
)
from durable_agent.session import Store
from tests.durable_runs.support import (
    FAST_RETRY,
    collect,
    echo,
    kinds,
    stored_texts,
    texts,
)
from tests.support.harness import Harness

# -- model failures -----------------------------------------------------------------------------


async def test_retried_model_call_stores_nothing_for_the_failed_attempt(
    harness: Harness, store: Store
) -> None:
    lm = ScriptedModel(
        [Reply(text="half an ans", error=ModelError("overloaded", retryable=True)), "whole"]
    )
    agent = await harness.open(lm, store=store, session_id="retry", model_retry=FAST_RETRY)
    stream = await agent.run("q")
    events = await collect(stream)
    assert texts(await stream.wait()) == ["whole"]
    assert kinds(events).count("message_end") == 1
    assert stored_texts(await store.load_entries("retry")) == ["q", "whole"]


async def test_retry_emits_a_new_message_start_in_process() -> None:
    lm = ScriptedModel(
        [Reply(text="half an ans", error=ModelError("overloaded", retryable=True)), "whole"]
    )
    agent = await new(model(lm), model_retry=RetryPolicy(initial_interval=0))
    events = await collect(await agent.run("q"))
    assert kinds(events, updates=False) == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ]
    updates = [e for e in events if e.agent is not None and e.agent.type == "message_update"]
    assert updates and updates[0].agent is not None
    assert updates[0].agent.message is not None
    assert updates[0].agent.message.text() == "half an "  # the failed attempt streamed ...
    assert len(await agent.store.load_entries(agent.session_id)) == 2  # ... and was not stored


async def test_final_model_failure_fails_the_run(harness: Harness, store: Store) -> None:
    lm = ScriptedModel(
        [
            Reply(error=ModelError("overloaded 1", retryable=True)),
            Reply(error=ModelError("overloaded 2", retryable=True)),
            "unused",
        ]
    )
    agent = await harness.open(
        lm,
        store=store,
        session_id="model-fails",
        model_retry={"max_attempts": 2, "initial_interval": 0},
    )
    stream = await agent.run("q")
    seen: list[Event] = []
    with pytest.raises(ModelError) as info:
        async for event in stream.events():
            seen.append(event)
    assert "overloaded 2" in str(info.value)
    with pytest.raises(ModelError):
        await stream.wait()
    assert "agent_end" not in kinds(seen) and "message_end" not in kinds(seen)
    stored = await store.load_entries("model-fails")
    assert stored_texts(stored) == ["q"]  # the input stays stored
    assert agent.leaf_id == stored[0].id
    assert not agent.running


async def test_final_model_failure_is_that_model_error_in_process() -> None:
    error = ModelError("invalid api key", retryable=False)
    agent = await new(model(ScriptedModel([Reply(error=error)])))
    with pytest.raises(ModelError) as info:
        await (await agent.run("q")).wait()
    assert info.value is error


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [196, 300])
async def test_a_reply_no_store_can_hold_fails_the_run_alike_on_every_executor(
    harness: Harness, store: Store, depth: int
) -> None:
    """A model (an application's own, or one a prompt led astray) whose reply holds arguments
    nested deeper than the codec keeps: the run fails with the store's refusal,
    ``PersistError``, after one call, storing nothing of the reply. Not, on Temporal, a bare
    ``AgentError`` naming pydantic's serializer after the model was called again on every
    retry (300 levels), nor a reply stored that the workflow cannot decode, its task retried
    until the run's timeout (196)."""
    deep = Reply.call("echo", {"text": "x", "n": _nested(depth)}, id="c1")
    lm = ScriptedModel(lambda request: deep)
    agent = await harness.open(
        lm, store=store, session_id="deep", tools=[echo], model_retry=FAST_RETRY
    )
    stream = await agent.run("q")
    with pytest.raises(PersistError) as info:
        await stream.wait()
    assert "persist message: " in str(info.value) and "nested" in str(info.value)
    assert len(lm.requests) == 1
    assert stored_texts(await store.load_entries("deep")) == ["q"]
