"""The inner agent loop and its events.

Where a turn goes through this package: :class:`ModelLoop` sends the model the conversation so
far, yields the reply's ``message_start`` / ``message_update`` / ``message_end`` events, runs the
reply's tool calls (concurrently when every tool allows it) and yields their results, then
``turn_end``. It is pull-based: it waits while its consumer (the run engine) stores each message,
so nothing goes on before the store has it (docs/design.md#handle-and-engine).
"""

from .events import AgentEvent, AgentEventType
from .hooks import Hooks
from .loop import (
    AgentRun,
    Loop,
    ModelLoop,
    RetryingModel,
    build_loop,
    model,
)
from .options import AgentOptions
from .tool_exec import LocalToolExecutor, failure_text

__all__ = [
    "AgentEvent",
    "AgentEventType",
    "AgentOptions",
    "AgentRun",
    "Hooks",
    "LocalToolExecutor",
    "Loop",
    "ModelLoop",
    "RetryingModel",
    "build_loop",
    "failure_text",
    "model",
]
