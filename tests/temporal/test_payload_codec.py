"""A payload codec through ``connect()``: conversation text never readable in history."""

from __future__ import annotations

import os

import pytest

from durable_agent import ScriptedModel, new
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, connect, run_workflow_id
from durable_agent.workflows.codec import AesGcmCodec
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, run_id, sid

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
