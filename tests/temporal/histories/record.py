"""Record run-workflow histories for the replay test (tests/temporal/test_replay_versions.py).

Run ``.venv/bin/python -m tests.temporal.histories.record NAME [SESSION]`` on the code whose
histories you want to keep (it writes ``tests/temporal/histories/NAME.json``). ``run_0_2.json``
(session ``replay-0-2``) is the 0.2 baseline. The scenario: a user message, a turn with one tool
call, a turn with two parallel calls, a final answer.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from durable_agent import Reply, ScriptedModel, ToolCall, new, tool
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, TemporalExecutor, run_workflow_id
from tests.support.temporal import FAST, running_worker, temporal_environment

HERE = Path(__file__).resolve().parent
SESSION = sys.argv[2] if len(sys.argv) > 2 else "replay-0-2"
RUN_ID = "00000000000000a1"


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            Reply(
                text="one", tool_calls=[ToolCall(id="c1", name="lookup", arguments={"key": "a"})]
            ),
            Reply(
                text="two",
                tool_calls=[
                    ToolCall(id="c2", name="lookup", arguments={"key": "b"}),
                    ToolCall(id="c3", name="lookup", arguments={"key": "c"}),
                ],
            ),
            Reply(text="done"),
        ]
    )


async def record(name: str) -> Path:
    async with temporal_environment() as client:
        store = MemoryStore()
        queue = f"record-{uuid.uuid4().hex[:8]}"
        spec = AgentSpec(model=script(), tools=[lookup])
        async with running_worker(client, store, {"agent": spec}, task_queue=queue):
            ex = TemporalExecutor(client, task_queue=queue, timeouts=FAST)
            agent = await new("agent", store=store, session_id=SESSION, executor=ex)
            await (await agent.run("question", run_id=RUN_ID)).wait()
        history = await client.get_workflow_handle(run_workflow_id(SESSION, RUN_ID)).fetch_history()
    out = HERE / f"{name}.json"
    out.write_text(history.to_json())
    return out


if __name__ == "__main__":
    print(asyncio.run(record(sys.argv[1] if len(sys.argv) > 1 else "run_0_2")))
