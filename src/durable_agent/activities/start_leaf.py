"""Where a run without a leaf starts (docs/design.md#temporal): ``ensure_session`` answers the
session's newest entry, with two exceptions read here.

- A workflow task re-run after the run's first batch (repairs and input) was stored finds that
  batch as the newest entries; the run started before it (:func:`newest_before`, given the IDs the
  batch is stored under: the inputs' own and the run's first random draws).
- An operator's reset retries the run from where the original execution started: its leaf is
  read from that execution's history (:func:`recorded_start_leaf`), where the ``ensure_session``
  marker holds it (:func:`local_activity_result`, which the client reads too when it attaches
  to a run started elsewhere).
"""

from __future__ import annotations

import json

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.service import RPCError

from ..session.entries import Entry
from .run_contracts import InputEntry

__all__ = ["input_id", "local_activity_result", "newest_before", "recorded_start_leaf"]


def newest_before(entries: list[Entry], own: set[str]) -> str:
    """The newest entry appended before the first of the run's ``own`` entries (``""`` if
    none): the leaf the run started from, even in a workflow task re-run after the run's first
    batch was stored (its IDs are the same in every run of the task)."""
    for i, entry in enumerate(entries):
        if entry.id in own:
            entries = entries[:i]
            break
    return entries[-1].id if entries else ""


def input_id(item: InputEntry) -> str | None:
    """The ID run input ``item`` is stored under, when its client chose it."""
    if item.message is not None:
        return item.id or None
    entry_id = json.loads(item.wire).get("id")
    return entry_id if isinstance(entry_id, str) and entry_id else None


async def recorded_start_leaf(workflow_id: str, run_id: str) -> str | None:
    """The leaf ``ensure_session`` returned in execution ``run_id`` of ``workflow_id`` (read
    from its local activity marker), or ``None`` when that execution never got one or its
    history is gone (then the caller falls back to the newest entry, as a fresh start would).

    An operator's ``temporal workflow reset`` to the run's first workflow task runs
    ``ensure_session`` again, by which time the newest entry may be another run's answer, or
    the run's own: a reset retries the run from where it started, so the leaf comes from the
    original execution's history (kept for the namespace's retention period)."""
    try:
        client = activity.client()
    except RuntimeError:  # an activity run outside a worker (unit tests): no history to read
        return None
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    try:
        async for event in handle.fetch_history_events():
            result = local_activity_result(event, "durable_agent.ensure_session")
            if result:
                [leaf] = await client.data_converter.decode(result, [str])
                return leaf if isinstance(leaf, str) else None
    except RPCError as exc:
        activity.logger.warning(
            "reset of %s: the original run %s is unreadable (%s); starting from the newest entry",
            workflow_id,
            run_id,
            exc.message,
        )
    return None


def local_activity_result(event: HistoryEvent, activity_type: str) -> list[Payload] | None:
    """The result payloads of a successful local activity of type ``activity_type`` that
    ``event`` records, else ``None``. A local activity shows in history as one marker, recorded
    when it has ended, holding its type (in the marker's ``data``, JSON) and its result."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    attrs = event.marker_recorded_event_attributes
    if attrs.marker_name != "core_local_activity" or attrs.HasField("failure"):
        return None
    data = attrs.details.get("data")
    if data is None or not data.payloads:
        return None
    try:
        marker = json.loads(data.payloads[0].data)
    except ValueError:
        return None
    if not isinstance(marker, dict) or marker.get("activity_type") != activity_type:
        return None
    result = attrs.details.get("result")
    return list(result.payloads) if result is not None else None
