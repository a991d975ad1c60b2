"""The delta channel that goes with a store, so a worker and its clients agree without config.

A MongoStore's channel is a collection in the same database, a FileStore's the side files in its
root, a MemoryStore's a dict shared by everyone holding that store object (one process). Both
sides derive it from the store they already share; any other store streams nothing (pass a
channel explicitly to ``create_worker``/``TemporalExecutor`` to stream anyway).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Literal

from ..session.store import Store
from ..stores.file import FileStore
from ..stores.memory import MemoryStore
from .channel import DeltaChannel, MemoryDeltas
from .file_deltas import FileDeltas

__all__ = ["LiveDeltas", "channel_for", "resolve"]

LiveDeltas = DeltaChannel | Literal["auto"] | None
"""What ``create_worker`` and ``TemporalExecutor`` accept: a channel, ``"auto"`` (the store's own
channel, the default) or ``None`` (no live deltas)."""

_channels: weakref.WeakKeyDictionary[Any, DeltaChannel] = weakref.WeakKeyDictionary()


def channel_for(store: Store) -> DeltaChannel | None:
    """The store's delta channel, one per store object (``None`` for unknown stores)."""
    try:
        cached = _channels.get(store)
    except TypeError:  # not weak-referenceable
        return None
    if cached is not None:
        return cached
    channel: DeltaChannel | None = None
    if isinstance(store, FileStore):
        channel = FileDeltas(store.root)
    elif isinstance(store, MemoryStore):
        channel = MemoryDeltas()
    elif "durable_agent.stores.mongo" in sys.modules:  # never import PyMongo for this
        from ..stores.mongo import MongoStore

        if isinstance(store, MongoStore):
            channel = store.live_deltas()
    if channel is not None:
        _channels[store] = channel
    return channel


def resolve(live: LiveDeltas, store: Store) -> DeltaChannel | None:
    if live == "auto":
        return channel_for(store)
    return live
