"""``DurableAgentKind``: runs are separable from a session's publish and compaction workflows,
both for workflows the library starts and for an operator's UI-style start."""

from __future__ import annotations

import urllib.parse
import uuid

import pytest
from temporalio.client import Client

from durable_agent import Event, ScriptedModel, new, text
from durable_agent.activities.run_contracts import RunInput
from durable_agent.cli.dev import workflows_url
from durable_agent.stores import MemoryStore
from durable_agent.workflows import SEARCH_ATTRIBUTE, AgentSpec, RunResult, run_workflow_id
from durable_agent.workflows.executor import run_input_item
from durable_agent.workflows.search import KIND_ATTRIBUTE, KIND_KEY
from tests.support.temporal import FAST, running_worker
from tests.temporal.helpers import RUN_TIMEOUT, consume, eventually, executor, queue, run_id

pytestmark = pytest.mark.temporal


async def _ids(client: Client, query: str, expected: int) -> set[str]:
    async def listed() -> set[str] | None:
        ids = {w.id async for w in client.list_workflows(query)}
        return ids if len(ids) >= expected else None

    return await eventually(listed, within=20, interval=0.2, what=f"visibility of {query}")


async def test_kind_separates_runs_from_publish_and_compact(temporal_client: Client) -> None:
    lm = ScriptedModel(["one", "Summary: one", "two"])
    store, q = MemoryStore(), queue()
    session = f"kind-{uuid.uuid4().hex[:8]}"
    published: list[Event] = []
    # a worker with a publisher: a client starts publish workflows only for one (without it,
    # whether `new()` starts one would depend on whether the worker's poller shows yet)
    async with running_worker(
        temporal_client,
        store,
        {"plain": AgentSpec(model=lm)},
        task_queue=q,
        publisher=published.append,
    ):
        agent = await new(
            "plain", store=store, session_id=session, executor=executor(temporal_client, q)
        )  # a publish workflow (session_init)
        rid = run_id()
        outcome = await consume(await agent.run("q1", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
        assert await agent.compact() is not None
        # an operator's start from the UI sets no search attributes: the workflow adds both
        ui_rid = run_id()
        handle = await temporal_client.start_workflow(
            "durable_agent.run",
            RunInput(
                session_id=session,
                run_id=ui_rid,
                agent="plain",
                inputs=[run_input_item(text("from the UI"))],
                timeouts=FAST,
            ),
            id=run_workflow_id(session, ui_rid),
            task_queue=q,
            result_type=RunResult,
            execution_timeout=RUN_TIMEOUT,
        )
        assert (await handle.result()).status == "completed"
        assert (await handle.describe()).typed_search_attributes.get(KIND_KEY) == "run"

        async def initialised() -> bool:
            return "session_init" in [e.type for e in published]

        await eventually(initialised, what="the publisher's session_init")

    everything = await _ids(temporal_client, f'{SEARCH_ATTRIBUTE} = "{session}"', 4)
    runs_query = f'{SEARCH_ATTRIBUTE} = "{session}" AND {KIND_ATTRIBUTE} = "run"'
    runs = await _ids(temporal_client, runs_query, 2)
    assert runs == {run_workflow_id(session, rid), run_workflow_id(session, ui_rid)}
    publish = await _ids(
        temporal_client, f'{SEARCH_ATTRIBUTE} = "{session}" AND {KIND_ATTRIBUTE} = "publish"', 1
    )
    assert publish and all(w.startswith("durable-agent/publish/") for w in publish)
    compact = await _ids(
        temporal_client, f'{SEARCH_ATTRIBUTE} = "{session}" AND {KIND_ATTRIBUTE} = "compact"', 1
    )
    assert len(compact) == 1 and next(iter(compact)).startswith(f"durable-agent/{session}/compact/")
    assert everything == runs | publish | compact

    # the UI link the CLI prints carries exactly the runs-only query
    url = workflows_url("http://127.0.0.1:8233", session)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["query"][0]
    assert await _ids(temporal_client, query, 2) == runs
