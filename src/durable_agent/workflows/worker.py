"""The worker: named agents, the store and the publisher, behind the durable-agent workflows."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ..activities import AgentActivities
from ..activities.spec import AgentSpec
from ..durable.limits import PAYLOAD_LIMIT
from ..durable.live import LiveDeltas
from ..durable.publisher import PublisherLike
from ..session.deltas import FASTEST_WRITE, SLOWEST_WRITE, WRITE_EVERY
from ..session.store import Store
from ..stores.remembering import DEFAULT_KNOWN_ENTRIES
from .run_workflow import RunWorkflow
from .search import ensure_search_attribute
from .store_check import PUBLISHER_MARK, store_id, with_store_id
from .typed_input import OneRunInput
from .verb_workflows import CompactWorkflow, PublishWorkflow

__all__ = [
    "DEFAULT_KNOWN_ENTRIES",
    "DEFAULT_MAX_CACHED_WORKFLOWS",
    "DEFAULT_MAX_CONCURRENT_ACTIVITIES",
    "DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS",
    "WORKFLOWS",
    "check_tuning",
    "create_worker",
    "workflow_runner",
]

WORKFLOWS = [RunWorkflow, CompactWorkflow, PublishWorkflow]

DEFAULT_MAX_CONCURRENT_ACTIVITIES = 100
"""Activity slots per worker process: model calls, tool calls and store writes in flight at once.
They are I/O-bound (a model call mostly waits on the provider), so one process holds many; the
worker's CPU, not this number, is what runs out first (README, "Running at scale")."""

DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS = 100
"""Workflow-task slots per worker process: run workflows advancing at once. Each task is a short
burst of CPU in this process, so more slots than cores only queue work inside the worker."""

DEFAULT_MAX_CACHED_WORKFLOWS = 1000
"""Run workflows kept in memory between turns (sticky), so the next task does not replay the
history. Set it to at least the number of runs a worker has open at once; 0 disables the cache."""


def check_tuning(
    max_concurrent_activities: int,
    max_concurrent_workflow_tasks: int,
    max_cached_workflows: int,
    known_entries: int = DEFAULT_KNOWN_ENTRIES,
    live_every: float = WRITE_EVERY,
) -> None:
    """Refuse tuning values Temporal would reject later, or that would stall every run."""
    if not FASTEST_WRITE <= live_every <= SLOWEST_WRITE:  # NaN too
        raise ValueError(
            f"live_every must be between {FASTEST_WRITE} and {SLOWEST_WRITE} s, got {live_every!r}"
        )
    for name, value, least in (
        ("max_concurrent_activities", max_concurrent_activities, 1),
        ("max_concurrent_workflow_tasks", max_concurrent_workflow_tasks, 1),
        ("max_cached_workflows", max_cached_workflows, 0),
        ("known_entries", known_entries, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if max_cached_workflows > 0 and max_concurrent_workflow_tasks < 2:
        raise ValueError(
            "max_concurrent_workflow_tasks must be at least 2 while workflows are cached "
            "(max_cached_workflows > 0): Temporal needs a slot for sticky and normal polls"
        )


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """The runner :func:`create_worker` uses. Sandboxed, ``durable_agent`` is passed through
    (deterministic in workflow code: clock and IDs come through RunEffects) instead of being
    re-imported for every workflow (about 250 ms each).

    Unsandboxed by default: these workflows run no user code (agents, models and tools run in
    activities), their determinism is the library's and is checked by replay tests and by the
    test suite, which runs every workflow sandboxed; the sandbox re-enters itself for every
    payload it converts, which costs about a tenth of a one-turn run."""
    if not sandboxed:
        return UnsandboxedWorkflowRunner()
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("durable_agent")
    )


async def create_worker(
    client: Client,
    *,
    task_queue: str,
    store: Store,
    agents: Mapping[str, AgentSpec],
    publisher: PublisherLike | None = None,
    payload_limit: int = PAYLOAD_LIMIT,
    register_search_attribute: bool = True,
    max_concurrent_activities: int = DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    max_concurrent_workflow_tasks: int = DEFAULT_MAX_CONCURRENT_WORKFLOW_TASKS,
    max_cached_workflows: int = DEFAULT_MAX_CACHED_WORKFLOWS,
    live_deltas: LiveDeltas = "auto",
    live_every: float = WRITE_EVERY,
    sandboxed: bool = False,
    known_entries: int = DEFAULT_KNOWN_ENTRIES,
    **worker_options: Any,
) -> Worker:
    """A Worker running the run, compaction and publish workflows for ``agents``.

    The three limits are per worker process (``DEFAULT_*``); a ``tuner`` in ``worker_options``
    replaces the two slot limits; a bad value raises ``ValueError`` before anything connects.
    ``live_deltas``: where model calls publish their streaming replies (docs/design.md#live-deltas):
    the store's own channel by default, one of your own, or ``None``; ``live_every``: seconds
    between two writes of a reply (slower costs the worker and each client following it fewer
    writes and wake-ups, and shows the text in larger steps). ``known_entries``: bytes of encoded
    entries the worker remembers (least recently used sessions dropped first) so a model call
    needs no session load (docs/design.md#worker-memory); 0 loads the session in every call.
    ``sandboxed``: see :func:`workflow_runner`. (Tests pass ``workflow_failure_exception_types``.)
    """
    slots = (max_concurrent_activities, max_concurrent_workflow_tasks, max_cached_workflows)
    check_tuning(*slots, known_entries, live_every)
    _check_agents(agents)
    _set_slots(worker_options, *slots)
    if register_search_attribute:
        await ensure_search_attribute(client)
    activities = AgentActivities(
        store,
        agents,
        publisher,
        payload_limit=payload_limit,
        live_deltas=live_deltas,
        live_every=live_every,
        known_entries=known_entries,
    )
    # a crashed worker's workflows move to another worker within seconds
    worker_options.setdefault("sticky_queue_schedule_to_start_timeout", timedelta(seconds=2))
    worker_options.setdefault("workflow_runner", workflow_runner(sandboxed))
    worker_options["interceptors"] = [*worker_options.get("interceptors", ()), OneRunInput()]
    worker_options["identity"] = await _identity(
        worker_options.get("identity") or client.identity, store, publisher is not None
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=activities.all(),
        **worker_options,
    )


def _set_slots(options: dict[str, Any], activities: int, tasks: int, cached: int) -> None:
    options["max_cached_workflows"] = cached
    if "tuner" not in options:  # Temporal refuses both a tuner and fixed slot counts
        options["max_concurrent_activities"] = activities
        options["max_concurrent_workflow_tasks"] = tasks


def _check_agents(agents: Mapping[str, AgentSpec]) -> None:
    """Refuse what is no AgentSpec now: else every run of that agent retries an AttributeError."""
    for name, spec in agents.items():
        if not isinstance(spec, AgentSpec):
            raise TypeError(
                f"agents[{name!r}] must be an AgentSpec, not {type(spec).__name__}: "
                "AgentSpec(model=..., tools=...)"
            )


async def _identity(given: str, store: Store, publishes: bool) -> str:
    """What clients read from the queue's pollers (docs/design.md#temporal): the store's ID, so a
    client on another store is refused before it starts a run, and whether the worker can
    deliver lifecycle events, which clients publish only then (both: store_check)."""
    identity = with_store_id(given, await store_id(store, create=True))
    return f"{identity} {PUBLISHER_MARK}" if publishes else identity
