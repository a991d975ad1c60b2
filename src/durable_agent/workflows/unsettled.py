"""What a failed or terminated run may have stored without the client hearing of it (11.8b).

A run that ends badly can leave writes in flight: an ``append_entries`` that timed out and applied
later, a ``call_model`` / ``call_tool`` attempt that commits under its stamp after the run was
terminated. Every such write was scheduled with its entry IDs in the activity's input, so the
run's history names them all; except a local activity's (the run's input commit, since
``local-store-v1``), whose input is not recorded: a run that fails after one names its entries in
its failure instead (:func:`~durable_agent.activities.failures.unsettled_ids`). A run terminated
during that local commit (a few milliseconds at its start) is the one case left to stored answers. The client reads them once, when the run failed, and hands them to
the handle as unsettled; the next run start reconciles them with the store
(:mod:`durable_agent.durable.reconcile`): the ones that landed join the handle's path.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from .types import AppendInput, CallModelInput, CallToolInput

__all__ = ["scheduled_entry_ids"]

logger = logging.getLogger("durable_agent.temporal")

_INPUTS: dict[str, type[Any]] = {
    "durable_agent.append_entries": AppendInput,
    "durable_agent.call_model": CallModelInput,
    "durable_agent.call_tool": CallToolInput,
}


async def scheduled_entry_ids(client: Client, workflow_id: str) -> list[str]:
    """The entry IDs the latest execution of ``workflow_id`` scheduled writes for, in order
    (``[]`` if its history cannot be read: reconciling is then left to stored answers)."""
    ids: list[str] = []
    handle = client.get_workflow_handle(workflow_id)  # the latest run of a continued chain
    try:
        async for event in handle.fetch_history_events():
            if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            attrs = event.activity_task_scheduled_event_attributes
            kind = _INPUTS.get(attrs.activity_type.name)
            if kind is None:
                continue
            [arg] = await client.data_converter.decode(attrs.input.payloads, [kind])
            if isinstance(arg, AppendInput):
                ids.extend(str(json.loads(wire)["id"]) for wire in arg.entries)
            elif arg.stamp is not None:
                ids.append(arg.stamp.id)
    except Exception as exc:  # best effort: a failed read leaves reconcile to stored answers
        logger.warning("could not read the history of %s: %s", workflow_id, exc)
        return []
    return ids
