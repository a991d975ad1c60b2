"""Replay safety: a recorded history of the run workflow still replays on today's workflow code
without a determinism error, sandboxed and not.

``histories/run_0_2.json`` is the 0.2 baseline (see ``histories/record.py``). While no release
has users, a change to the commands the workflow schedules re-records it (runs started on an
older version finish before new workers take over); after one, such a change keeps the old path
behind ``workflow.patched`` (tests/test_versioning_policy.py, docs/design.md#versioning), or
this test fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agent.workflows import WORKFLOWS, run_workflow_id
from durable_agent.workflows.worker import workflow_runner

HISTORIES = Path(__file__).resolve().parent / "histories"


@pytest.mark.parametrize("sandboxed", [False, True], ids=["default-runner", "sandboxed"])
@pytest.mark.parametrize(("name", "session"), [("run_0_2", "replay-0-2")])
async def test_recorded_run_history_replays_on_current_code(
    name: str, session: str, sandboxed: bool
) -> None:
    text = (HISTORIES / f"{name}.json").read_text()
    history = WorkflowHistory.from_json(run_workflow_id(session, "00000000000000a1"), text)
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(sandboxed),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)
