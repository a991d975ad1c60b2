"""The baseline for the overhead benchmark: a workflow running ``count`` no-op activities.

Its own module because the workflow sandbox re-imports the module a workflow is defined in.
``STARTS`` records (worker side, outside the sandbox) when each no-op activity began.
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity, workflow

__all__ = ["STARTS", "BareWorkflow", "noop"]

STARTS: list[float] = []


@activity.defn(name="bench.noop")
async def noop(i: int) -> int:
    STARTS.append(time.perf_counter())
    return i


@workflow.defn(name="bench.bare")
class BareWorkflow:
    @workflow.run
    async def run(self, count: int) -> int:
        for i in range(count):
            await workflow.execute_activity(
                "bench.noop", i, result_type=int, start_to_close_timeout=timedelta(seconds=30)
            )
        return count
