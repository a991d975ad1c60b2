"""The end of a run an operator reset: keep the session's active branch where the user left it.

``temporal workflow reset`` of a run retries it from the leaf it started at, so its entries grow
a sibling branch (docs/design.md#temporal). A handle resumes at a session's *last appended*
entry, so without more the retried branch of an old run would become the session's active one
and rewind the user's chat. When the session moved on since the original run ended (its newest
entry, not counting this run's, was created after the original execution closed), the reset run
ends by appending a small custom entry, :class:`ResetMarker`, under that newest entry: the
user's branch stays the newest, and the model never sees the marker. A reset of the session's
latest run appends nothing, so its retry is the active branch, as after ``/retry``. The run's
result says which (:class:`~.contracts.ResetNote`).

Only executions that are resets schedule this step, after the reset point, so the command
sequence of every other run is unchanged. Whether an execution is a reset must come from its
history, which a replay sees alike (a replayer given the history alone takes the original's run
ID for its own, so ``workflow.info()`` cannot tell): a reset to the first workflow task re-runs
``load_path``, whose recorded answer says so; a later reset point reseeds the workflow's
randomness there (``workflow.register_random_seed_callback``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import activity, workflow
from temporalio.exceptions import ActivityError
from temporalio.service import RPCError

from ..durable.persist import Header
from ..session.entries import CustomEntry, register_custom
from ..session.errors import SessionError
from .base import ActivityBase, heartbeating
from .contracts import KeepLeafInput, Timeouts
from .failures import application_error
from .run_contracts import ResetNote
from .store_steps import new_entry_id, store_retry

__all__ = ["ResetMarker", "ResetSteps", "keep_session_leaf"]


@register_custom("durable_agent.reset")
class ResetMarker(CustomEntry):
    """Appended by a reset run under the entry the session's active branch ended at, so a
    reopened handle resumes there and not on the reset's sibling branch."""

    run_id: str = ""
    """The reset execution's run ID."""
    reset_of: str = ""
    """The original execution's run ID."""
    branch_leaf: str = ""
    """Where the reset's own branch ends (``/switch`` or ``run --leaf`` goes there)."""


class ResetSteps(ActivityBase):
    """``keep_session_leaf``."""

    @activity.defn(name="durable_agent.keep_session_leaf")
    async def keep_session_leaf(self, inp: KeepLeafInput) -> ResetNote | None:
        """Append a :class:`ResetMarker` under the session's newest entry not stored by this
        run, when the session moved on since the original run ended; idempotent. ``None``: this
        execution is the original, not a reset."""
        if inp.reset_of == activity.info().workflow_run_id:
            return None
        note = ResetNote(of_run=inp.reset_of)
        try:
            async with heartbeating():
                entries = await self.store.load_entries(inp.session_id)
        except SessionError as exc:
            raise application_error(exc) from exc
        if any(e.id == inp.marker.id for e in entries):  # an earlier attempt stored it
            return note.model_copy(update={"kept_leaf": inp.marker.parent_id or ""})
        own = set(inp.own_entry_ids)
        others = [e for e in entries if e.id not in own]
        if not others:
            return note
        newest = others[-1]
        ended = await _closed_at(activity.info().workflow_id or "", inp.reset_of)
        if ended is None or newest.created_at <= ended:
            return note  # the session did not move on: the retried branch is its newest
        note = note.model_copy(update={"kept_leaf": newest.id})
        if entries[-1].id == newest.id:
            return note  # this run stored nothing after it
        header = inp.marker.model_copy(update={"parent_id": newest.id})
        marker = header.on(
            ResetMarker(
                run_id=activity.info().workflow_run_id,
                reset_of=inp.reset_of,
                branch_leaf=inp.own_entry_ids[-1] if inp.own_entry_ids else "",
            )
        )
        try:
            async with heartbeating():
                await self.store.append_entries(inp.session_id, [marker])
        except SessionError as exc:
            raise application_error(exc) from exc
        return note.model_copy(update={"marker_id": marker.id})


async def _closed_at(workflow_id: str, run_id: str) -> datetime | None:
    """When execution ``run_id`` of ``workflow_id`` closed (a reset closes a running one), or
    ``None`` when unknown (then the session counts as not moved on, as before this step)."""
    try:
        description = (
            await activity.client().get_workflow_handle(workflow_id, run_id=run_id).describe()
        )
    except (RuntimeError, RPCError) as exc:  # RuntimeError: no client (outside a worker)
        activity.logger.warning("reset of %s: run %s not described (%s)", workflow_id, run_id, exc)
        return None
    return description.close_time


# -- workflow side ---------------------------------------------------------------------------


async def keep_session_leaf(
    session_id: str, reset_of: str, own_entry_ids: list[str], t: Timeouts
) -> ResetNote | None:
    """Schedule ``keep_session_leaf`` (a local activity) at the end of a reset run. A failure
    is logged, not raised: the run's own work is done, only the active branch may move."""
    marker = Header(id=new_entry_id(), created_at=workflow.now())
    inp = KeepLeafInput(
        session_id=session_id,
        reset_of=reset_of,
        own_entry_ids=own_entry_ids,
        marker=marker,
    )
    try:
        note: ResetNote | None = await workflow.execute_local_activity_method(
            ResetSteps.keep_session_leaf,
            inp,
            start_to_close_timeout=timedelta(seconds=t.store_start_to_close),
            retry_policy=store_retry(t),
            summary="keep the session's active branch",
        )
    except ActivityError as exc:
        workflow.logger.warning("reset of run %s: active branch not kept: %s", reset_of, exc)
        return ResetNote(of_run=reset_of)
    return note
