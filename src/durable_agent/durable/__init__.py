"""The durable agent: sessions that survive crashes, one run engine, two executors."""

from ..agent.loop import model
from .agent import Agent, Middleware, Runner, fork_entry_id, new
from .compaction import DEFAULT_COMPACT_PROMPT, estimate_tokens, plan_compaction
from .engine import CANCELLED_TEXT, RunEffects, RunEngine, RunStatus
from .errors import (
    AgentClosedError,
    AgentError,
    CompactError,
    EntryNotFoundError,
    EventGapError,
    NoFactoryError,
    PayloadTooLargeError,
    PersistError,
    RunActiveError,
    RunCancelledError,
    UnknownAgentError,
)
from .events import Event, EventType
from .executor import Executor, LocalExecutor
from .inputs import EntryLike, ephemeral, file, image, meta, text
from .publisher import Publisher, PublisherLike
from .stream import RunStream, fail

__all__ = [
    "CANCELLED_TEXT",
    "DEFAULT_COMPACT_PROMPT",
    "Agent",
    "AgentClosedError",
    "AgentError",
    "CompactError",
    "EntryLike",
    "EntryNotFoundError",
    "Event",
    "EventGapError",
    "EventType",
    "Executor",
    "LocalExecutor",
    "Middleware",
    "NoFactoryError",
    "PayloadTooLargeError",
    "PersistError",
    "Publisher",
    "PublisherLike",
    "RunActiveError",
    "RunCancelledError",
    "RunEffects",
    "RunEngine",
    "RunStatus",
    "RunStream",
    "Runner",
    "UnknownAgentError",
    "ephemeral",
    "estimate_tokens",
    "fail",
    "file",
    "fork_entry_id",
    "image",
    "meta",
    "model",
    "new",
    "plan_compaction",
    "text",
]
