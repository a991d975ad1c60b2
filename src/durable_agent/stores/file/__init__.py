"""FileStore: one JSON Lines file per session under a root directory, with its live-delta side
files (docs/design.md#file-store)."""

from .deltas import FileDeltas
from .store import FileStore

__all__ = ["FileDeltas", "FileStore"]
