"""``python -m durable_agent.cli``: the same as the ``durable-agent`` script."""

from .entry import main

if __name__ == "__main__":
    main()
