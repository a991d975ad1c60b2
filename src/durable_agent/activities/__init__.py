"""The Temporal activities and the worker-side agent definition."""

from .agent_activities import DEFAULT_PAYLOAD_LIMIT, AgentActivities
from .failures import application_error
from .spec import PLAIN_OPTIONS, AgentSpec

__all__ = [
    "DEFAULT_PAYLOAD_LIMIT",
    "PLAIN_OPTIONS",
    "AgentActivities",
    "AgentSpec",
    "application_error",
]
