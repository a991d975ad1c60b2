"""A client and a worker on different stores (docs/design.md#temporal): the library's
``TemporalExecutor`` compares its store's ID with the one its queue's workers advertise, as the
CLI does, and refuses a run before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from durable_agent import ScriptedModel, new
from durable_agent.session import SessionNotFoundError
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec, StoreMismatchError
from durable_agent.workflows.store_check import poller_identities
from tests.support.polling import eventually
from tests.support.temporal import running_worker
from tests.temporal.helpers import consume, executor, queue, sid

pytestmark = pytest.mark.temporal


async def test_a_client_on_another_store_is_refused_before_anything_is_created(
    temporal_client: Client, tmp_path: Path
) -> None:
    theirs, mine, q = FileStore(tmp_path / "worker"), FileStore(tmp_path / "client"), queue()
    lm = ScriptedModel(["hello"])
    async with running_worker(temporal_client, theirs, {"a": AgentSpec(model=lm)}, task_queue=q):
        # a queue with no poller yet compares nothing: wait for the worker's first poll
        await eventually(lambda: poller_identities(temporal_client, q), within=30, what="a poller")
        session = sid("elsewhere")
        agent = await new(
            "a", store=mine, session_id=session, executor=executor(temporal_client, q)
        )
        with pytest.raises(StoreMismatchError, match="another store"):
            await agent.run("hi")
        assert not agent.running
        assert lm.requests == []
        for store in (theirs, mine):
            with pytest.raises(SessionNotFoundError):
                await store.load_entries(session)

        # the same store under another object (another process, say) is the same store
        same = FileStore(tmp_path / "worker")
        agent = await new(
            "a", store=same, session_id=session, executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("hi"))
        assert outcome.error is None, repr(outcome.error)
        assert [m.text() for m in outcome.messages or []] == ["hello"]
