"""The ``durable-agent`` command line: demo, dev server, worker, and session tools.

Applications hand their agents to ``durable-agent worker --app module:attr`` as an :class:`App`.
The commands themselves live in :mod:`durable_agent.cli.app` (they need the ``cli`` and
``temporal`` extras); importing this package needs only the ``temporal`` extra.
"""

from .appdef import App, AppLoadError, load_app

__all__ = ["App", "AppLoadError", "load_app"]
