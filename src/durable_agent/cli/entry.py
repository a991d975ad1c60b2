"""The ``durable-agent`` script's entry point: says which extra to install instead of crashing.

A base install (``pip install durable-agent``) puts the script on PATH although the commands need
the ``cli`` and ``temporal`` extras; importing them here, inside a guard, turns the missing module
into one line naming the extra. Nothing at this module's top level needs an extra.
"""

from __future__ import annotations

import sys

__all__ = ["EXTRAS", "main", "missing_extra"]

EXTRAS = {
    "typer": "cli",
    "click": "cli",
    "rich": "cli",
    "temporalio": "temporal",
    "pymongo": "mongo",
    "bson": "mongo",
    "motor": "motor",
    "openai": "openai",
    "anthropic": "anthropic",
    "cryptography": "encryption",
    "opentelemetry": "otel",
}
"""Top-level module -> the extra of ``durable-agent`` that installs it."""


def missing_extra(exc: ImportError, *, needs: str = "cli") -> str | None:
    """The one-line message for a module an extra provides, or None for any other import error.

    ``needs`` is what to install when the missing module belongs to ``cli`` or ``temporal``
    (the ``cli`` extra brings the Temporal SDK too); a store's or provider's module names its own
    extra.
    """
    name = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra is None:
        return None
    install = needs if extra in ("cli", "temporal") else extra
    return (
        f"the {extra!r} extra of durable-agent is not installed (no module named {name!r}): "
        f"pip install 'durable-agent[{install}]'"
    )


def main() -> None:
    """Import the commands and run them; a missing extra exits 1 with the install line."""
    try:
        from .app import main as run
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)
    run()
