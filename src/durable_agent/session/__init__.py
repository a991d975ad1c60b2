"""Sessions: entries, the record, the store contract, the codec, the tree, views and repair.

Where a turn goes through this package: the run's history is the model view
(:mod:`.views`) of the active path (:func:`path`, :mod:`.tree`), repaired so every call is
answered (:mod:`.repair`); every entry the turn produces is encoded (:mod:`.codec`) and appended
through the :class:`Store` protocol (:mod:`.store`) (docs/design.md#store-contract).
"""

from .appendplan import encode_batch, plan_append
from .approvals import (
    APPROVAL_DECISION,
    APPROVAL_REQUEST,
    ApprovalDecision,
    ApprovalRequest,
    PendingItem,
    decision_entry_id,
    edited_args,
    pending_at_tail,
    pending_in,
    pending_items,
)
from .codec import decode_entry, encode_entry, entry_to_wire, wire_to_entry
from .entries import (
    CompactionEntry,
    CustomEntry,
    Entry,
    EntryBase,
    MessageEntry,
    custom_class,
    register_custom,
)
from .errors import (
    CorruptSessionError,
    EntryConflictError,
    EntryDecodeError,
    EntryEncodeError,
    EntryTooLargeError,
    InvalidSessionIdError,
    ParentNotFoundError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreClosedError,
    StoreUnavailableError,
)
from .ids import MAX_SESSION_ID_LENGTH, new_id, validate_session_id
from .render import TreeLine, entry_summary, message_summary, render_tree, tree_lines
from .repair import INTERRUPTED_TEXT, dangling_calls, interrupted_result, repair_tool_calls
from .store import (
    AppendFeed,
    AppendWatch,
    GuardedStore,
    LastEntriesStore,
    LastEntryStore,
    RetentionStore,
    SeqStore,
    SessionRecord,
    Store,
)
from .tree import TreeNode, path, tree
from .turns import Turn, is_turn_start, last_turn
from .views import model_view, raw_model_view, transcript_view

__all__ = [
    "APPROVAL_DECISION",
    "APPROVAL_REQUEST",
    "ApprovalDecision",
    "ApprovalRequest",
    "PendingItem",
    "decision_entry_id",
    "edited_args",
    "pending_at_tail",
    "pending_in",
    "pending_items",
    "INTERRUPTED_TEXT",
    "AppendFeed",
    "AppendWatch",
    "MAX_SESSION_ID_LENGTH",
    "CompactionEntry",
    "CorruptSessionError",
    "CustomEntry",
    "Entry",
    "EntryBase",
    "EntryConflictError",
    "EntryDecodeError",
    "EntryEncodeError",
    "EntryTooLargeError",
    "InvalidSessionIdError",
    "MessageEntry",
    "SessionError",
    "SessionExistsError",
    "ParentNotFoundError",
    "SessionNotFoundError",
    "RetentionStore",
    "GuardedStore",
    "LastEntriesStore",
    "LastEntryStore",
    "SeqStore",
    "SessionRecord",
    "Store",
    "StoreClosedError",
    "StoreUnavailableError",
    "TreeLine",
    "TreeNode",
    "Turn",
    "custom_class",
    "dangling_calls",
    "decode_entry",
    "encode_batch",
    "encode_entry",
    "entry_summary",
    "entry_to_wire",
    "interrupted_result",
    "is_turn_start",
    "last_turn",
    "message_summary",
    "model_view",
    "new_id",
    "path",
    "plan_append",
    "raw_model_view",
    "register_custom",
    "render_tree",
    "repair_tool_calls",
    "transcript_view",
    "tree",
    "tree_lines",
    "validate_session_id",
    "wire_to_entry",
]
