"""Replay safety across versions (issue 10 item 5): a history recorded by an earlier version of
the run workflow still replays on today's workflow code without a determinism error.

``histories/run_v1.json`` was recorded on main at 328e167 (two activities per output: the producer,
then ``append_entries``); ``histories/run_v2.json`` on main at fe1f1d0 (producers commit their own
output; the run's start and input commit are ordinary activities, before ``local-store-v1``
made them local); see ``histories/record.py``. A change that makes the workflow schedule
other commands for the same history must keep the old path behind ``workflow.patched`` (or use a
new workflow type name), or this test fails.
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
@pytest.mark.parametrize(("name", "session"), [("run_v1", "replay-v1"), ("run_v2", "replay-v2")])
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
