"""``python -m durable_agent``: the ``durable-agent`` command where its script is not on PATH (and
how ``dev`` and ``demo`` start their workers)."""

from .cli import main

main()
