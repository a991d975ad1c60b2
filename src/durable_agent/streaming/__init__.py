"""Live token deltas on a side channel (issue 13): never the source of truth, no history cost.

A model call's partial message is published as patches keyed by (session_id, run_id, position of
its ``message_start``); a reader rebuilds the exact partial messages. The stored entry always wins.
"""

from .auto import LiveDeltas, channel_for, resolve
from .channel import Cursor, DeltaChannel, DeltaKey, MemoryDeltas
from .file_deltas import FileDeltas
from .follow import DeltaFollower
from .patch import Delta, apply_patch, diff_patch
from .writer import DeltaWriter, clear_later, writer_for

__all__ = [
    "Cursor",
    "Delta",
    "DeltaChannel",
    "DeltaFollower",
    "DeltaKey",
    "DeltaWriter",
    "FileDeltas",
    "LiveDeltas",
    "MemoryDeltas",
    "apply_patch",
    "channel_for",
    "clear_later",
    "diff_patch",
    "resolve",
    "writer_for",
]
