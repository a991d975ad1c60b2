"""The inner agent loop and its events."""

from .events import AgentEvent, AgentEventType
from .hooks import Hooks
from .loop import AgentRun, Factory, Loop, ModelFactory, ModelLoop, build_loop, model
from .options import AgentOptions
from .retry import RetryingModel
from .tool_exec import LocalToolExecutor, ToolExecutor, failure_text

__all__ = [
    "AgentEvent",
    "AgentEventType",
    "AgentOptions",
    "AgentRun",
    "Factory",
    "Hooks",
    "LocalToolExecutor",
    "Loop",
    "ModelFactory",
    "ModelLoop",
    "RetryingModel",
    "ToolExecutor",
    "build_loop",
    "failure_text",
    "model",
]
