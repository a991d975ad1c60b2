"""The ``durable-agent`` command line: demo, dev server, worker, and session tools.

Applications hand their agents to ``durable-agent worker --app module:attr`` as an :class:`App`.
The commands themselves live in :mod:`durable_agent.cli.app` (they need the ``cli`` and
``temporal`` extras); :class:`App` needs only the ``temporal`` extra. The names are imported on
first use, so the script's entry point (:mod:`durable_agent.cli.entry`) can report a missing
extra instead of failing while this package is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .appdef import App, AppLoadError, load_app

__all__ = ["App", "AppLoadError", "load_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import appdef

        return getattr(appdef, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
