"""The ``durable-agent`` command line, and :class:`App`: what an application hands
``durable-agent worker --app module:attr``.

The worker owns what must never travel through Temporal (model clients, keys, tool handlers), so
an application describes them in code and points the worker at it. ``attr`` may be an :class:`App`,
a dict with the same keys, or a zero-argument callable returning either (so that clients and
stores are built only in the worker process that uses them).

This module imports nothing beyond the standard library at its top level: an app module imports
:class:`App` with only the ``temporal`` extra installed, and the script's entry point
(:mod:`durable_agent.cli.__main__`), which runs after this package is imported, can still say which
extra is missing. The commands themselves live in the package's modules, one per command group.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..durable import PublisherLike
    from ..session import Store
    from ..workflows import AgentSpec

__all__ = ["App", "AppLoadError", "coerce_app", "load_app"]


class AppLoadError(Exception):
    """``--app`` names nothing importable, or something that is not an App."""


@dataclass
class App:
    """A worker's definition: named agents, and optionally its store, publisher and queue.

    ``store=None`` means the store comes from the command line (``--store``, the environment or
    the default FileStore), which lets one app run against a file store in development and MongoDB
    in production without edits.
    """

    agents: Mapping[str, AgentSpec]
    store: Store | None = None
    publisher: PublisherLike | None = None
    task_queue: str | None = None
    description: str = field(default="")


def coerce_app(value: Any, where: str = "app") -> App:
    """An :class:`App` from an App, a dict of its fields, or a callable returning one."""
    # Imported here, not above: see the module docstring (the temporal extra may be missing).
    from ..workflows import AgentSpec

    if callable(value) and not isinstance(value, App):
        value = value()
    if isinstance(value, Mapping):
        unknown = set(value) - {"agents", "store", "publisher", "task_queue", "description"}
        if unknown:
            raise AppLoadError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if "agents" not in value:
            raise AppLoadError(f"{where}: a dict app needs an 'agents' mapping")
        value = App(**dict(value))
    if not isinstance(value, App):
        raise AppLoadError(
            f"{where} is a {type(value).__name__}, not a durable_agent.cli.App, a dict or a "
            "callable returning one"
        )
    if not value.agents:
        raise AppLoadError(f"{where} defines no agents")
    for name, spec in value.agents.items():
        if not isinstance(spec, AgentSpec):
            raise AppLoadError(
                f"{where}: agent {name!r} is a {type(spec).__name__}, not an AgentSpec"
            )
    return value


def _import_target(target: str) -> Any:
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise AppLoadError(f"no such file: {path}")
        name = f"_durable_agent_app_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise AppLoadError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ModuleNotFoundError as exc:  # as for a module name, below
            raise AppLoadError(f"cannot import {path}: {exc}") from exc
        return module
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise AppLoadError(f"cannot import {target!r}: {exc}") from exc


def load_app(ref: str) -> App:
    """Load ``module:attr`` (or ``path/to/file.py:attr``); ``attr`` defaults to ``app``."""
    target, _, attr = ref.rpartition(":") if ":" in ref else (ref, "", "app")
    if not target:
        raise AppLoadError(f"--app must look like module:attr, got {ref!r}")
    module = _import_target(target)
    value: Any = module
    for part in (attr or "app").split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppLoadError(f"{target!r} has no attribute {attr!r}") from None
    return coerce_app(value, ref)
