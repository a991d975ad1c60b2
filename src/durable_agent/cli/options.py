"""The options the commands share (typer ``Annotated`` types), defined once."""

from __future__ import annotations

from typing import Annotated

import typer

from .settings import DEFAULT_TASK_QUEUE, ENV_STORE, ENV_TASK_QUEUE

__all__ = [
    "AddressOpt",
    "AgentOpt",
    "JsonOpt",
    "NamespaceOpt",
    "ProfileOpt",
    "QueueOpt",
    "StoreOpt",
    "VerboseOpt",
]

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help=(
            f"file:PATH or mongodb://... (default: ${ENV_STORE}, then $MONGODB_URI, then "
            "file:<data dir>/sessions)."
        ),
        show_default=False,
    ),
]
QueueOpt = Annotated[
    str | None,
    typer.Option(
        "--task-queue",
        help=f"Temporal task queue (default: ${ENV_TASK_QUEUE}, else '{DEFAULT_TASK_QUEUE}').",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Temporal host:port (default: $TEMPORAL_ADDRESS, the profile, a running "
        "`durable-agent dev`, then localhost:7233).",
        show_default=False,
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        help="Temporal namespace (default: $TEMPORAL_NAMESPACE, the profile, then 'default').",
        show_default=False,
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="Profile of the temporal CLI's config file (default: $TEMPORAL_PROFILE, "
        "then 'default').",
        show_default=False,
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Say which Temporal server and store are used.")
]
AgentOpt = Annotated[str, typer.Option("--agent", help="Agent name registered on the worker.")]
