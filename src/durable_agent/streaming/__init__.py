"""Live token deltas on a side channel (issue 13): never the source of truth, no history cost.

A model call's partial message is published as patches keyed by (session_id, run_id, position of
its ``message_start``); a reader rebuilds the exact partial messages. The stored entry always wins.
"""

from .channel import DeltaKey, MemoryDeltas
from .patch import Delta, apply_patch, diff_patch

__all__ = ["Delta", "DeltaKey", "MemoryDeltas", "apply_patch", "diff_patch"]
