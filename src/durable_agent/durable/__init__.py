"""The durable agent: sessions that survive crashes, one run engine, two executors.

Where a turn goes through this package: :meth:`Agent.run` (:mod:`.agent`) reconciles the handle
with the store (:mod:`.reconcile`) and hands the run to its executor (:mod:`.executor` in
process; ``durable_agent.workflows`` on Temporal); either way the :class:`RunEngine`
(:mod:`.engine`) drives the loop, stamps each produced entry (:mod:`.persist`), commits it and
only then emits its event, the receipt the :class:`RunStream` (:mod:`.stream`) hands to the
caller and applies to the handle's state (:mod:`.state`) (docs/design.md#handle-and-engine).
"""

from ..agent.loop import model
from .agent import Agent, Middleware, Runner, fork_entry_id, new
from .compaction import DEFAULT_COMPACT_PROMPT, estimate_tokens
from .errors import (
    AgentClosedError,
    AgentError,
    ApprovalNotPendingError,
    ApprovalPendingError,
    CompactError,
    EntryNotFoundError,
    EventGapError,
    InvalidRunInputError,
    NoFactoryError,
    PayloadTooLargeError,
    PersistError,
    RunActiveError,
    RunCancelledError,
    RunNotAcceptingError,
    UnknownAgentError,
)
from .events import Event, EventType
from .inbox import MAX_QUEUED, When
from .inputs import EntryLike, ephemeral, file, image, meta, text
from .publisher import Publisher, PublisherLike
from .stream import RunStream, fail

__all__ = [
    "DEFAULT_COMPACT_PROMPT",
    "Agent",
    "AgentClosedError",
    "AgentError",
    "ApprovalNotPendingError",
    "ApprovalPendingError",
    "CompactError",
    "EntryLike",
    "EntryNotFoundError",
    "Event",
    "EventGapError",
    "EventType",
    "InvalidRunInputError",
    "MAX_QUEUED",
    "Middleware",
    "NoFactoryError",
    "PayloadTooLargeError",
    "PersistError",
    "Publisher",
    "PublisherLike",
    "RunActiveError",
    "RunCancelledError",
    "RunNotAcceptingError",
    "RunStream",
    "Runner",
    "UnknownAgentError",
    "When",
    "ephemeral",
    "estimate_tokens",
    "fail",
    "file",
    "fork_entry_id",
    "image",
    "meta",
    "model",
    "new",
    "text",
]
