"""Store implementations: MemoryStore, FileStore and (with the ``mongo`` extra) MongoStore, and
RememberingStore, the wrapper a worker puts around its store to build paths from memory.

Where a turn goes through this package: each produced entry is one ``append_entries`` call (one
JSON line, one MongoDB document), and each store also carries the live-delta channel a streaming
reply is published on (``store.live_deltas()``, docs/design.md#live-deltas); the memory and
Mongo stores also wake the followers of a session at each append (``watch_appends``, the append
feed, :mod:`.appends`; MongoStore from a change stream on a replica set). On a worker,
:class:`RememberingStore` answers the turn's path from memory (docs/design.md#worker-memory).

``MongoStore`` is imported lazily so that ``import durable_agent.stores`` never needs PyMongo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .file import FileStore
from .memory import MemoryStore
from .remembering import RememberingStore

if TYPE_CHECKING:
    from .mongo import MongoStore

__all__ = ["FileStore", "MemoryStore", "MongoStore", "RememberingStore"]


if not TYPE_CHECKING:  # a checker that saw it would take every misspelled name for an Any

    def __getattr__(name: str) -> Any:
        """Import optional stores on first use (PEP 562), so their dependencies stay optional."""
        if name == "MongoStore":
            from .mongo import MongoStore

            return MongoStore
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
