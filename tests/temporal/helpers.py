"""Shared helpers of the Temporal executor tests: executors, bounded polling, store checks."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowHandle

from durable_agent import Event, Message, RunStream
from durable_agent.activities.contracts import BodyRefs, WireEvent, event_from_wire
from durable_agent.session import Entry, MessageEntry, Store, encode_entry
from durable_agent.workflows import RunState, TemporalExecutor, Timeouts, run_workflow_id
from tests.support.polling import eventually
from tests.support.temporal import FAST

__all__ = [
    "CRASH",
    "RUN_TIMEOUT",
    "Outcome",
    "activity_counts",
    "assert_one_chain",
    "assert_receipts_stored",
    "assert_replays",
    "consume",
    "event_types",
    "eventually",
    "executor",
    "fetch_history_text",
    "history_text",
    "hydrate",
    "load",
    "messages_of",
    "queue",
    "run_id",
    "run_state",
    "sid",
    "wait_for_file",
    "wait_state",
]

T = TypeVar("T")

RUN_TIMEOUT = timedelta(seconds=60)
"""Every test workflow's execution timeout: a determinism bug fails fast instead of hanging."""

CRASH = FAST.model_copy(update={"store_heartbeat": 2.0})
"""FAST plus a short store-activity heartbeat, so a worker killed inside an append is noticed in
about two seconds (the default start-to-close would take 30)."""


def queue() -> str:
    """A task queue no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


def sid(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def run_id() -> str:
    return uuid.uuid4().hex[:16]


def executor(
    client: Client, task_queue: str, *, timeouts: Timeouts = FAST, **options: Any
) -> TemporalExecutor:
    options.setdefault("execution_timeout", RUN_TIMEOUT)
    return TemporalExecutor(client, task_queue=task_queue, timeouts=timeouts, **options)


def _exists(path: Path) -> bool:
    return path.exists()


async def wait_for_file(path: Path, *, within: float = 30.0) -> None:
    async def probe() -> bool:
        return _exists(path)

    await eventually(probe, within=within, what=f"marker {path.name}")


async def run_state(client: Client, session_id: str, rid: str) -> RunState:
    handle = client.get_workflow_handle(run_workflow_id(session_id, rid))
    state: RunState = await handle.query("state", result_type=RunState)
    return state


async def wait_state(
    client: Client,
    session_id: str,
    rid: str,
    predicate: Callable[[RunState], bool],
    *,
    within: float = 20.0,
    what: str = "run state",
) -> RunState:
    async def probe() -> RunState | None:
        state = await run_state(client, session_id, rid)
        return state if predicate(state) else None

    return await eventually(probe, within=within, what=what)


@dataclass
class Outcome:
    """Everything a consumer saw of one run."""

    events: list[Event] = field(default_factory=list)
    messages: list[Message] | None = None
    error: BaseException | None = None

    def types(self) -> list[str]:
        return [e.agent.type for e in self.events if e.agent is not None]

    def recorded_types(self) -> list[str]:
        """:meth:`types` without the live deltas: what the run's history records (their number
        depends on batching and on when a client attached)."""
        return [t for t in self.types() if t != "message_update"]

    def receipts(self) -> list[Entry]:
        return [entry for e in self.events if e.entries for entry in e.entries]


async def consume(stream: RunStream) -> Outcome:
    """Read every event of ``stream`` (never raising) and then ``wait()``."""
    out = Outcome()
    try:
        async for event in stream.events():
            out.events.append(event)
    except Exception as exc:
        out.error = exc
    try:
        out.messages = await stream.wait()
    except Exception as exc:
        out.error = out.error or exc
    return out


def messages_of(entries: Sequence[Entry]) -> list[Message]:
    return [e.message for e in entries if isinstance(e, MessageEntry)]


def assert_one_chain(entries: Sequence[Entry], *, root_parent: str | None = None) -> None:
    """The stored entries form one chain in append order, each message exactly once."""
    assert entries, "nothing stored"
    parent = root_parent
    for entry in entries:
        assert entry.parent_id == parent, (
            f"entry {entry.id} has parent {entry.parent_id!r}, expected {parent!r}: "
            + json.dumps([[e.id, e.parent_id] for e in entries])
        )
        parent = entry.id
    ids = [e.id for e in entries]
    assert len(set(ids)) == len(ids), "an entry ID is stored twice"
    bodies = [m.model_dump_json(exclude={"timestamp"}) for m in messages_of(entries)]
    assert len(set(bodies)) == len(bodies), "a message is stored twice"


def assert_receipts_stored(outcome: Outcome, stored: Sequence[Entry]) -> None:
    """Every receipt the client saw names a stored entry, with the stored content."""
    by_id = {e.id: encode_entry(e) for e in stored}
    for entry in outcome.receipts():
        assert entry.id in by_id, f"receipt {entry.id} names no stored entry"
        assert encode_entry(entry) == by_id[entry.id], (
            f"receipt {entry.id} differs from the store:\n{encode_entry(entry)}\n{by_id[entry.id]}"
        )


async def load(store: Store, session_id: str) -> list[Entry]:
    return await store.load_entries(session_id)


def history_text(history_json: str) -> str:
    """A history's JSON plus every base64 payload in it decoded, for substring searches."""
    parts = [history_json]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    with contextlib.suppress(ValueError):
                        raw = base64.b64decode(value, validate=True)
                        parts.append(raw.decode("utf-8", "replace"))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(history_json))
    return "\n".join(parts)


async def fetch_history_text(handle: WorkflowHandle[Any, Any]) -> str:
    history = await handle.fetch_history()
    return history_text(history.to_json())


def activity_counts(history_json: str) -> Counter[str]:
    """Ordinary activities by type name; local ones (recorded as markers) as ``local:<name>``."""
    counts: Counter[str] = Counter()
    for event in json.loads(history_json)["events"]:
        attrs = event.get("activityTaskScheduledEventAttributes")
        if attrs:
            counts[attrs["activityType"]["name"]] += 1
        marker = event.get("markerRecordedEventAttributes")
        if marker and marker["markerName"] == "core_local_activity":
            data = json.loads(base64.b64decode(marker["details"]["data"]["payloads"][0]["data"]))
            counts[f"local:{data['activity_type']}"] += 1
    return counts


def event_types(history_json: str) -> list[str]:
    return [e.get("eventType", "") for e in json.loads(history_json).get("events", [])]


async def assert_replays(client: Client, workflow_id: str) -> None:
    """The workflow's (latest) history replays without a determinism error, sandboxed and not."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from durable_agent.workflows import WORKFLOWS
    from durable_agent.workflows.worker import workflow_runner

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    for sandboxed in (True, False):  # the suite's workers, and create_worker's default
        replayer = Replayer(
            workflows=WORKFLOWS,
            data_converter=pydantic_data_converter,
            workflow_runner=workflow_runner(sandboxed),
        )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{workflow_id}: {result.replay_failure!r}"


def _message_of(entries: Mapping[str, Entry], entry_id: str) -> Message:
    entry = entries[entry_id]
    assert isinstance(entry, MessageEntry), f"the entry {entry_id!r} an event names"
    return entry.message


def hydrate(wire: WireEvent, entries: Mapping[str, Entry]) -> Event:
    """The event a recorded ``wire`` stands for, with the bodies it left out (those its ``refs``
    name) read from ``entries``, the store's entries by ID: what a reader of the ``events`` query
    does (docs/design.md#bounded-history)."""
    event, refs, agent = event_from_wire(wire), wire.refs or BodyRefs(), wire.agent
    update: dict[str, object] = {}
    if refs.entry_ids is not None and wire.entries is None:
        update["entries"] = [entries[i] for i in refs.entry_ids]
    if agent is not None and event.agent is not None:
        inner: dict[str, object] = {}
        if refs.message is not None and agent.message is None:
            inner["message"] = _message_of(entries, refs.message)
        if refs.result is not None and agent.result is None:
            inner["result"] = _message_of(entries, refs.result)
        if refs.input is not None and agent.input is None:
            inner["input"] = [_message_of(entries, i) for i in refs.input]
        if refs.args is not None and agent.args is None:
            calls = _message_of(entries, refs.args).tool_calls()
            found = [c.arguments for c in calls if c.id == agent.tool_call_id]
            inner["args"] = found[0] if found else {}
        if inner:
            update["agent"] = event.agent.model_copy(update=inner)
    return event.model_copy(update=update) if update else event
