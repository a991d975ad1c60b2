"""Which Temporal and which store a command uses, and how it says so.

A command that silently talks to the wrong server or store is the most confusing failure the CLI
can have (a session that exists "is not found"), so every command records here what it resolved;
errors always print it and ``-v`` prints it up front.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ..workflows.config import ConnectSettings, resolve_connect_settings
from .settings import data_dir, read_server_info

__all__ = ["TARGET", "Target", "TemporalFlags", "client_env", "display_store"]


@dataclass(frozen=True)
class TemporalFlags:
    """``--address``, ``--namespace`` and ``--profile``; each beats its environment variable."""

    address: str | None = None
    namespace: str | None = None
    profile: str | None = None


@dataclass
class Target:
    """What the running command talks to (one command per process)."""

    temporal: str | None = None
    store: str | None = None
    echo: Callable[[str], None] | None = None
    """Set by ``-v``: called with each line as soon as it is resolved."""

    def set_temporal(self, description: str) -> None:
        self.temporal = description
        if self.echo is not None:
            self.echo(f"using Temporal {description}")

    def set_store(self, description: str) -> None:
        self.store = description
        if self.echo is not None:
            self.echo(f"using store {description}")

    def lines(self) -> list[str]:
        out = []
        if self.temporal is not None:
            out.append(f"Temporal {self.temporal}")
        if self.store is not None:
            out.append(f"store {self.store}")
        return out


TARGET = Target()

_USERINFO = re.compile(r"^(mongodb(?:\+srv)?://)([^@/]*)@")


def display_store(spec: str) -> str:
    """A store spec fit to print: a MongoDB password is masked."""

    def mask(match: re.Match[str]) -> str:
        user = match.group(2).split(":", 1)[0]
        return f"{match.group(1)}{user}:***@" if ":" in match.group(2) else match.group(0)

    return _USERINFO.sub(mask, spec)


def client_env(
    flags: TemporalFlags, env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], ConnectSettings]:
    """The environment ``connect_from_env`` gets, and the settings it resolves to.

    Flags override their variables; with no address from the flag, ``TEMPORAL_ADDRESS`` or the
    profile, a running ``durable-agent dev`` server is used, then ``localhost:7233``.
    """
    merged = dict(os.environ if env is None else env)
    for name, value in (
        ("TEMPORAL_ADDRESS", flags.address),
        ("TEMPORAL_NAMESPACE", flags.namespace),
        ("TEMPORAL_PROFILE", flags.profile),
    ):
        if value:
            merged[name] = value
    settings = resolve_connect_settings(merged)
    if settings.address_source == "default":
        info = read_server_info(data_dir(merged))
        if info is not None:
            merged["TEMPORAL_ADDRESS"] = info.address
            settings = resolve_connect_settings(merged)
            settings = replace(
                settings, address_source=f"the running `durable-agent dev` (pid {info.owner_pid})"
            )
        else:
            settings = replace(
                settings,
                address_source="the default (no --address, TEMPORAL_ADDRESS, profile or "
                "running `durable-agent dev`)",
            )
    if flags.address:
        settings = replace(settings, address_source="--address")
    TARGET.set_temporal(settings.describe())
    return merged, settings
