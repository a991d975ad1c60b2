"""In-process model retries: a LanguageModel wrapper, so the loop itself never retries.

Each retry starts a fresh stream (a new ``start`` event, hence a new ``message_start``), which is
why consumers reset their display on ``message_start``. Under Temporal the activity retry policy
does this job instead and the wrapper is not used.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..ai.model import LanguageModel, ModelError, ModelEvent, ModelRequest
from ..ai.tools import RetryPolicy

__all__ = ["RetryingModel"]


class RetryingModel:
    """Retries retryable :class:`ModelError`s of ``model`` per ``policy``."""

    def __init__(self, model: LanguageModel, policy: RetryPolicy) -> None:
        self.model = model
        self.policy = policy

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        attempt = 1
        while True:
            try:
                async for event in self.model.stream(request):
                    yield event
                return
            except ModelError as exc:
                if not exc.retryable or attempt >= self.policy.max_attempts:
                    raise
                delay = max(self.policy.delay(attempt), exc.retry_after or 0.0)
                await asyncio.sleep(min(delay, self.policy.max_interval))
                attempt += 1
