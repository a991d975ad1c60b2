"""The Temporal activities: every side effect of a durable run, each beside the workflow-side
code that schedules it (docs/design.md#temporal).

Where a model turn goes through this package: the run workflow's loop asks
:class:`~.model_call.ActivityModel` for a reply, which schedules ``call_model``
(:mod:`.model_call`) with the header the engine reserved; the activity builds the request from
the stored path, streams the reply to the live-delta channel, commits it under that header
(:meth:`~.base.ActivityBase.commit`) and answers the stored entry, which the engine records as
the receipt. Tool calls go the same way through :mod:`.tool_call`; the run's start and its other
commits through :mod:`.store_steps`. Everything that crosses the boundary is in
:mod:`.contracts`; errors leave as ``ApplicationError`` (:mod:`.failures`).

:class:`AgentActivities` is the worker's registration: every activity, sharing one store,
named agents and publisher.
"""

from collections.abc import Callable
from typing import Any

try:
    import temporalio  # noqa: F401
except ImportError as _missing:  # the base install: say which extra brings the SDK
    raise ImportError(
        f"durable_agent.activities needs the 'temporal' extra of durable-agent ({_missing}): "
        "pip install '.[temporal]'",
        name=_missing.name,
    ) from None

from .model_call import ModelActivity
from .reset_steps import ResetSteps
from .stamp_steps import StampSteps
from .store_steps import StoreSteps
from .tool_call import ToolActivity
from .verb_steps import VerbSteps

__all__ = [
    "AgentActivities",
]


class AgentActivities(StoreSteps, ModelActivity, ToolActivity, VerbSteps, ResetSteps, StampSteps):
    """Activities bound to one worker's store, named agents and publisher."""

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.ensure_session,
            self.load_path,
            self.append_entries,
            self.call_model,
            self.note_cancel,
            self.call_tool,
            self.summarize,
            self.publish,
            self.keep_session_leaf,
            self.settle_stamp,
            self.settled_reply,
        ]
