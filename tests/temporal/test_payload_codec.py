"""A payload codec through ``connect()``: conversation text never readable in history."""

from __future__ import annotations

import os

import pytest

from durable_agent import Reply, RetryPolicy, ScriptedModel, new, tool
from durable_agent.ai import ModelRequest
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, connect, run_workflow_id
from durable_agent.workflows.codec import AesGcmCodec
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, messages_of, queue, run_id, sid

pytestmark = pytest.mark.temporal

CODEC: AesGcmCodec | None = AesGcmCodec(os.urandom(32))
SECRET_IN = "my locker code is 31-7-42 platypus"
SECRET_OUT = "noted, zebra-lantern"


async def test_encrypted_history_hides_the_conversation(address: str) -> None:
    client = await connect(address, payload_codec=CODEC)
    plain = await connect(address)
    store, q, session, rid = MemoryStore(), queue(), sid("codec"), run_id()
    lm = ScriptedModel([SECRET_OUT])
    async with running_worker(client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new("a", store=store, session_id=session, executor=executor(client, q))
        outcome = await consume(await agent.run(SECRET_IN, run_id=rid))
    assert outcome.error is None, repr(outcome.error)
    assert outcome.messages is not None
    assert [m.text() for m in outcome.messages] == [SECRET_OUT]
    history = await plain.get_workflow_handle(run_workflow_id(session, rid)).fetch_history()
    raw = b"".join(e.SerializeToString() for e in history.events)  # payload bytes as stored
    assert b"binary/encrypted-aesgcm" in raw
    for secret in (SECRET_IN, SECRET_OUT, "platypus", "zebra-lantern"):
        assert secret.encode() not in raw


async def test_encrypted_history_hides_failure_messages(address: str) -> None:
    """A tool's error often quotes what it was asked (``no account for <the user's e-mail>``):
    with a codec, the activity failure's message is encrypted too, not only the payloads, and the
    worker (with the codec) still reads it back into the stored result."""

    @tool(retry=RetryPolicy(max_attempts=1))
    async def find(q: str) -> str:
        """Looks a record up, and finds none."""
        raise LookupError(f"no record for {q}")

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user":
            return Reply.call("find", {"q": "zebra-lantern"}, id="f1")
        return Reply(text="none found")

    client = await connect(address, payload_codec=CODEC)
    plain = await connect(address)
    store, q, session, rid = MemoryStore(), queue(), sid("codec"), run_id()
    spec = AgentSpec(model=ScriptedModel(respond), tools=[find])
    async with running_worker(client, store, {"a": spec}, task_queue=q):
        agent = await new("a", store=store, session_id=session, executor=executor(client, q))
        outcome = await consume(await agent.run(SECRET_IN, run_id=rid))
    assert outcome.error is None, repr(outcome.error)
    stored = messages_of(await store.load_entries(session))
    assert stored[-2].text() == "tool execution failed: LookupError: no record for zebra-lantern"
    history = await plain.get_workflow_handle(run_workflow_id(session, rid)).fetch_history()
    failed = [e for e in history.events if e.HasField("activity_task_failed_event_attributes")]
    assert failed  # the tool's failure is in the history...
    raw = b"".join(e.SerializeToString() for e in history.events)
    assert b"zebra-lantern" not in raw  # ...encrypted
    assert all(
        e.activity_task_failed_event_attributes.failure.message == "Encoded failure" for e in failed
    )
