"""Local activities in a workflow's history (issue 10, ``local-store-v1``).

An ordinary activity shows in history as scheduled / started / completed events; a local one as a
single ``core_local_activity`` marker, recorded when it has ended, that holds its type (in the
marker's ``data``, JSON) and its result payloads (``result``) but not its input. Code that reads a
run's history for what an activity answered reads both forms.
"""

from __future__ import annotations

import json

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

__all__ = ["LOCAL_ACTIVITY_MARKER", "local_activity_result"]

LOCAL_ACTIVITY_MARKER = "core_local_activity"


def local_activity_result(event: HistoryEvent, activity_type: str) -> list[Payload] | None:
    """The result payloads of a successful local activity of type ``activity_type`` that
    ``event`` records, else ``None`` (another event, type or a failed attempt)."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    attrs = event.marker_recorded_event_attributes
    if attrs.marker_name != LOCAL_ACTIVITY_MARKER or attrs.HasField("failure"):
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
