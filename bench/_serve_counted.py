"""``durable-agent serve`` with its store reads counted (``http_bench.py`` runs it).

``python bench/_serve_counted.py --src DIR --counts FILE -- <serve arguments>`` imports
durable-agent from ``DIR`` (a tree's ``src``: this one's, or a ``git archive`` of an older
revision's), counts every call of ``FileStore.load_entries`` and ``load_entries_after`` (the
store's entry reads), of ``load_session`` (a record read) and of ``FileDeltas.read_now`` (a
live-delta read: ``read`` goes through it) made by any store object of the process, and writes
``{"store", "channel", "record", "src"}`` to ``FILE`` on ``SIGUSR1`` (the bench asks before and
after a batch of runs). The wrappers are set on the classes before the server builds its store, so
every read is counted, whoever makes it: the session hubs, the runs' own streams, the routes.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import signal
import sys
from pathlib import Path
from typing import Any


def _count(cls: type, name: str, kind: str, counted: dict[str, int]) -> None:
    inner = getattr(cls, name)
    if asyncio.iscoroutinefunction(inner):

        async def counting(*args: Any, **kwargs: Any) -> Any:
            counted[kind] += 1
            return await inner(*args, **kwargs)

    else:

        def counting(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            counted[kind] += 1
            return inner(*args, **kwargs)

    setattr(cls, name, counting)


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--")
    own, serve = argv[:split], argv[split + 1 :]
    src = Path(own[own.index("--src") + 1]).resolve()
    counts = Path(own[own.index("--counts") + 1])
    sys.path.insert(0, str(src))
    import durable_agent
    import durable_agent.cli
    from durable_agent.stores import FileStore
    from durable_agent.stores.file import FileDeltas

    assert Path(durable_agent.__file__).resolve().is_relative_to(src), "imported another tree"
    counted = {"store": 0, "channel": 0, "record": 0}
    for name in ("load_entries", "load_entries_after"):
        _count(FileStore, name, "store", counted)
    _count(FileStore, "load_session", "record", counted)
    _count(FileDeltas, "read_now", "channel", counted)

    def dump(*_: object) -> None:
        counts.write_text(json.dumps({**counted, "src": str(src)}))

    signal.signal(signal.SIGUSR1, dump)
    sys.argv = ["durable-agent", *serve]
    command: Any = durable_agent.cli
    if not hasattr(command, "main"):  # a tree from before the entry point moved into the package
        command = importlib.import_module("durable_agent.cli.__main__")
    command.main()


if __name__ == "__main__":
    main()
