"""Whether the workers of a task queue have a publisher (docs/design.md#temporal).

Lifecycle events of client verbs (``session_init`` of every ``new()``, branch, fork) reach the
worker's publisher through a publish workflow: a start and an activity, both billed, for every
event. Without a publisher the worker drops them, so a client asks first: a worker created with a
publisher says so in its Temporal identity (:data:`PUBLISHER_MARK`, as the CLI's worker adds its
store's ID), and the client reads the identities of the queue's pollers (a ``DescribeTaskQueue``
call, which is not billed), remembering the answer for :data:`RECHECK_AFTER` seconds. A queue with
no poller yet, or an answer that cannot be had, counts as having one: an event is never dropped
for want of asking.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

__all__ = ["PUBLISHER_MARK", "RECHECK_AFTER", "PublisherCheck"]

logger = logging.getLogger("durable_agent.temporal")

PUBLISHER_MARK = "publisher"
"""The word a worker with a publisher adds to its identity."""
RECHECK_AFTER = 60.0
"""Seconds a client trusts what it found (a worker with a publisher that starts meanwhile is
seen after at most this long)."""


class PublisherCheck:
    """Whether some worker polling ``task_queue`` has a publisher (module doc)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self._answer: bool | None = None
        self._asked = 0.0

    async def any(self) -> bool:
        now = asyncio.get_running_loop().time()
        if self._answer is not None and now - self._asked < RECHECK_AFTER:
            return self._answer
        try:
            identities = await self._identities()
        except RPCError as exc:
            logger.debug("could not list the pollers of %s: %s", self.task_queue, exc)
            return True
        if not identities:
            return True  # no worker yet: one with a publisher may be starting
        self._answer = any(PUBLISHER_MARK in identity.split() for identity in identities)
        self._asked = now
        return self._answer

    async def _identities(self) -> list[str]:
        response = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=self.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return [p.identity for p in response.pollers]
