"""A session deleted and created again elsewhere stays deleted for a worker that remembers it
(docs/design.md#worker-memory): a run from a leaf of the deleted session fails before any write,
its conversation never reaches the model, whatever the worker remembers.

The delete and the re-create go around the worker's memory, as another process's would (the
CLI's ``sessions rm``, a second worker): straight on the store the worker wraps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel, new
from durable_agent.durable.errors import EntryNotFoundError
from durable_agent.session import SessionNotFoundError
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, sid

pytestmark = pytest.mark.temporal


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_stale_handle_after_delete_and_recreate_fails_before_any_write(
    temporal_client: Client, kind: str, tmp_path: Path
) -> None:
    store = MemoryStore() if kind == "memory" else FileStore(tmp_path / "s")
    lm, q = ScriptedModel(["the secret answer", "should never be asked"]), queue()
    async with running_worker(temporal_client, store, {"a": AgentSpec(model=lm)}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=sid("gone"), executor=executor(temporal_client, q)
        )
        first = await consume(await agent.run("a private question"))
        assert first.error is None, repr(first.error)
        assert len(lm.requests) == 1

        # "clear chat" in another process: deleted, and the ID taken again
        await store.delete_session(agent.session_id)
        await store.create_session(agent.session_id)

        stale = await consume(await agent.run("and now?"))
        assert isinstance(stale.error, (SessionNotFoundError, EntryNotFoundError)), repr(
            stale.error
        )
        assert len(lm.requests) == 1, "the deleted conversation was sent to the model"
        assert await store.load_entries(agent.session_id) == []
