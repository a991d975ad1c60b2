"""The Temporal activities: every side effect of a durable run, bound to one worker.

:class:`AgentActivities` is the worker's registration: the store activities
(:mod:`.store_activities`), the model call (:mod:`.model_activity`) and the tool call
(:mod:`.tool_activity`), sharing one store, agents and publisher (:mod:`.base`). Errors leave as
``ApplicationError`` (:mod:`.failures`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import DEFAULT_PAYLOAD_LIMIT
from .failures import application_error
from .model_activity import ModelActivity
from .store_activities import StoreActivities
from .tool_activity import ToolActivity

__all__ = ["DEFAULT_PAYLOAD_LIMIT", "AgentActivities", "application_error"]


class AgentActivities(StoreActivities, ModelActivity, ToolActivity):
    """Activities bound to one worker's store, named agents and publisher."""

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.ensure_session,
            self.load_path,
            self.append_entries,
            self.call_model,
            self.call_tool,
            self.summarize,
            self.publish,
        ]
