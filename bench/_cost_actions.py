"""Billable Temporal actions of a workload, two ways: the dev server's own ``action`` metric, and a
count rebuilt from the workflow histories plus the billable calls the clients counted.

The server (``temporal server start-dev --metrics-port P``) counts an action on its frontend for
every successful billable call (``common/rpc/interceptor/telemetry.go``): a workflow start, a
scheduled activity (and one per retried attempt, ``activity_retry``), one ``command_BatchMarkers``
per workflow task that records markers (local activities), a heartbeat that reaches the server, a
query (but the SDK's metadata query), a signal, an accepted or rejected update, a timer, a search
attribute upsert (both sides' run workflows make one), a continue-as-new, a child workflow (two).
:func:`scrape` reads the counter by ``action_type`` for one namespace; :func:`by_kind` groups the
labels into the kinds the tables show.

:func:`history_actions` counts what histories record of the same (starts, activities and their
retries, marker-recording workflow tasks, timers, signals, accepted updates, search attribute
upserts, the rest as ``other``); queries are not in histories and are taken from the clients' own
counts; heartbeats have no second source (only their throttled sends reach the server) and are
compared with nothing.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

__all__ = [
    "KINDS",
    "by_kind",
    "cross_check",
    "histories_actions",
    "history_actions",
    "list_runs",
    "scrape",
    "settled",
]

KINDS = (
    "starts",
    "activities",
    "local-activity tasks",
    "heartbeats",
    "queries",
    "updates",
    "signals",
    "timers",
    "search-attribute upserts",
    "other",
)

_LINE = re.compile(r"^action\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(metrics_url: str, namespace: str = "default") -> Counter[str]:
    """The server's ``action`` counter so far, by ``action_type``, for ``namespace``."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    out: Counter[str] = Counter()
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        if labels.get("namespace") == namespace:
            out[labels.get("action_type", "?")] += round(float(m["value"]))
    return out


async def settled(metrics_url: str, quiet: float = 2.0, limit: float = 60.0) -> Counter[str]:
    """The counter once it has not moved for ``quiet`` seconds: the server's metrics reach the
    endpoint about a second after the calls they count (measured: a conversation's actions
    showed up 0.5-0.9 s after its client returned), so one unchanged pair of scrapes
    ``quiet`` seconds apart spans at least one report."""
    last = scrape(metrics_url)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while loop.time() < deadline:
        await asyncio.sleep(quiet)
        now = scrape(metrics_url)
        if now == last:
            return now
        last = now
    return last


def kind_of(action_type: str) -> str:
    """The kind of one ``action_type`` label (the labels name gRPC methods and command types,
    e.g. ``grpc_QueryWorkflow``, ``command_COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK``)."""
    key = action_type.lower().replace("_", "")
    rules = (
        ("starts", ("startworkflowexecution", "signalwithstart", "executemultioperation")),
        ("activities", ("scheduleactivitytask", "activityretry")),
        ("local-activity tasks", ("batchmarkers",)),
        ("heartbeats", ("heartbeat",)),
        ("queries", ("queryworkflow",)),
        ("updates", ("updateworkflowexecution:",)),
        ("signals", ("signalworkflowexecution", "signalexternal")),
        ("timers", ("starttimer",)),
        ("search-attribute upserts", ("upsertworkflowsearch", "modifyworkflowproperties")),
    )
    for kind, needles in rules:
        if any(n in key for n in needles):
            return kind
    return "other"


def by_kind(actions: Mapping[str, int]) -> dict[str, int]:
    out = dict.fromkeys(KINDS, 0)
    for label, n in actions.items():
        out[kind_of(label)] += n
    return out


async def list_runs(
    client: Client, queue: str, since: datetime, expect: int, within: float = 20.0
) -> list[tuple[str, str]]:
    """(workflow ID, run ID) of the workflows on ``queue`` started at ``since`` or later, once
    visibility (eventually consistent) lists at least ``expect`` of them and the list is stable."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    previous: list[tuple[str, str]] = []
    while True:
        runs = [
            (w.id, w.run_id)
            async for w in client.list_workflows(f'TaskQueue = "{queue}"')
            if w.start_time >= since
        ]
        if (len(runs) >= expect and runs == previous) or loop.time() > deadline:
            return sorted(runs)
        previous = runs
        await asyncio.sleep(0.5)


def history_actions(events: Iterable[HistoryEvent]) -> Counter[str]:
    """The actions one workflow history records, by kind (queries and heartbeats excluded)."""
    out: Counter[str] = Counter()
    marker_tasks: set[int] = set()
    for e in events:
        t = e.event_type
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            a = e.workflow_execution_started_event_attributes
            out["starts"] += not a.continued_execution_run_id and not a.HasField(
                "parent_workflow_execution"
            )
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            out["activities"] += 1
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            out["activities"] += max(0, e.activity_task_started_event_attributes.attempt - 1)
        elif t == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker_tasks.add(e.marker_recorded_event_attributes.workflow_task_completed_event_id)
        elif t == EventType.EVENT_TYPE_TIMER_STARTED:
            out["timers"] += 1
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            sent_by_workflow = e.workflow_execution_signaled_event_attributes.HasField(
                "external_workflow_execution"
            )
            out["signals"] += not sent_by_workflow  # that one counts as its sender's command
        elif t == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            out["signals"] += 1
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            out["updates"] += 1
        elif t in (
            EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
            EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
        ):
            out["search-attribute upserts"] += 1
        elif t == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            out["other"] += 2
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            out["other"] += 1
    out["local-activity tasks"] += len(marker_tasks)
    return out


async def histories_actions(client: Client, runs: Iterable[tuple[str, str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for wid, rid in runs:
        history = await client.get_workflow_handle(wid, run_id=rid).fetch_history()
        total.update(history_actions(history.events))
    return total


def cross_check(
    metric: Mapping[str, int], histories: Mapping[str, int], queries: int
) -> dict[str, tuple[int, int]]:
    """The kinds where the metric and the second source differ: kind -> (metric, second)."""
    second = {**dict.fromkeys(KINDS, 0), **histories, "queries": queries}
    return {
        k: (metric[k], second[k]) for k in KINDS if k != "heartbeats" and metric[k] != second[k]
    }
