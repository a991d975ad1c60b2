"""A worker registers its search attributes with calls a loaded server may cancel now and then
(the dev server did, under a full test run: a worker failed to start): each is sent again after
a transient refusal, and only then."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.workflows.search import TRANSIENT, retried


def _answering_after(
    failures: list[RPCStatusCode],
) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= len(failures):
            raise RPCError("refused", failures[len(calls) - 1], b"")
        return "listed"

    return calls, call


async def test_a_transient_refusal_is_sent_again() -> None:
    calls, call = _answering_after([RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE])
    assert await retried(call, pause=0) == "listed"
    assert len(calls) == 3


async def test_any_other_refusal_is_raised_at_once() -> None:
    calls, call = _answering_after([RPCStatusCode.PERMISSION_DENIED])
    with pytest.raises(RPCError) as refused:
        await retried(call, pause=0)
    assert refused.value.status == RPCStatusCode.PERMISSION_DENIED and len(calls) == 1


async def test_a_refusal_that_lasts_is_raised_after_the_attempts() -> None:
    calls, call = _answering_after([RPCStatusCode.DEADLINE_EXCEEDED] * 9)
    with pytest.raises(RPCError) as refused:
        await retried(call, attempts=4, pause=0)
    assert refused.value.status in TRANSIENT and len(calls) == 4
