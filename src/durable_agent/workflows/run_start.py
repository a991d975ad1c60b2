"""Where a run starts: its leaf and what the store holds there, before the run writes anything.

Two store activities, both checked before any entry is stored: ``ensure_session`` (only when the
input names no leaf: create the session if absent, resolve its newest entry) and ``load_path``
(check the agent and the leaf, answer the repairs the run stores first and the agent's tools).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from ..activities.failures import is_cancellation, run_failure
    from .activity_calls import call_activity, store_retry
    from .types import EnsureSessionInput, LoadPathInput, PathInfo, RunInput

__all__ = ["LOCAL_STORE", "RESET_START_LEAF", "open_path"]

LOCAL_STORE = "local-store-v1"
"""Patch marker: the run's store steps (``ensure_session``, ``load_path``, ``append_entries``)
are local activities (issue 10): a run's start and input commit then cost no server round trip,
so a one-turn run is one ordinary activity, its model call. Executions started before it replay
with ordinary store activities."""

RESET_START_LEAF = "reset-start-leaf-v1"
"""Patch marker: a reset execution of a run started without a leaf retries from the leaf the
original execution resolved (issue 15 item 8); recorded only in reset executions."""


async def open_path(inp: RunInput, *, local: bool = False) -> tuple[str, PathInfo]:
    """The run's starting leaf (the session's newest entry when the input names none, the
    session created if absent) and what ``load_path`` found there: repairs, tools.
    ``local``: both as local activities (see :data:`LOCAL_STORE`)."""
    t = inp.timeouts
    leaf = inp.leaf_id
    try:
        if leaf is None:
            leaf = await call_activity(
                "durable_agent.ensure_session",
                EnsureSessionInput(
                    session_id=inp.session_id, agent=inp.agent, reset_of=_reset_of()
                ),
                str,
                start_to_close=t.store_start_to_close,
                retry=store_retry(t),
                heartbeat=t.store_heartbeat,
                summary="ensure session",
                local=local,
            )
        info = await call_activity(
            "durable_agent.load_path",
            LoadPathInput(session_id=inp.session_id, leaf_id=leaf, agent=inp.agent),
            PathInfo,
            start_to_close=t.store_start_to_close,
            retry=store_retry(t),
            heartbeat=t.store_heartbeat,
            summary="load path",
            local=local,
        )
    except ActivityError as exc:
        if is_cancellation(exc):
            raise CancelledError("run cancelled") from exc
        raise run_failure(exc) from exc
    return leaf, info


def _reset_of() -> str | None:
    """The original run when this execution is an operator's reset of it, else ``None``.

    A reset execution keeps the original's start event, so its ``original_execution_run_id``
    names another run; a continue-as-new execution carries its leaf and never asks. The patch is
    taken before looking at run IDs (which a replayer may not reproduce): the answer only feeds
    an activity argument, so replay stays deterministic whatever it is."""
    if not workflow.patched(RESET_START_LEAF):
        return None
    info = workflow.info()
    if info.continued_run_id is not None or info.run_id == info.original_execution_run_id:
        return None
    return info.original_execution_run_id
