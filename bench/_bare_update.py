"""The baseline for the approval benchmark: a workflow whose ``ping`` update does nothing.

Its own module because the workflow sandbox re-imports the module a workflow is defined in. The
workflow waits until its ``stop`` update; ``ping`` measures a bare update round trip on the same
server as a decision.
"""

from __future__ import annotations

from temporalio import workflow

__all__ = ["BareUpdates"]


@workflow.defn(name="bench.bare_updates")
class BareUpdates:
    def __init__(self) -> None:
        self._stop = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._stop)

    @workflow.update(name="ping")
    async def ping(self, n: int) -> int:
        return n

    @workflow.update(name="stop")
    async def stop(self) -> None:
        self._stop = True
