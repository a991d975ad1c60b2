"""The Temporal executor: workflows, the worker factory and the client-side executor.

Requires the ``temporal`` extra (``temporalio``). Where a model turn goes through this package:
:class:`TemporalExecutor` (:mod:`.executor`) starts the run workflow (:mod:`.run_workflow`),
whose engine drives the loop and schedules ``call_model`` through the activity-backed model of
``activities.model_call``; the stored reply comes back as the engine's receipt, which the client's
:class:`~.run_stream.RunFollower` reads from the store as it follows the session, applying each
receipt to the handle (docs/design.md#temporal). :func:`delete_session_workflows` deletes what
Temporal keeps of a deleted session (docs/design.md#retention).
"""

try:
    import temporalio  # noqa: F401
except ImportError as _missing:  # the base install: say which extra brings the SDK
    raise ImportError(
        f"durable_agent.workflows needs the 'temporal' extra of durable-agent ({_missing}): "
        "pip install '.[temporal]'",
        name=_missing.name,
    ) from None

from ..activities.contracts import Timeouts
from ..activities.run_contracts import RunResult, RunState
from ..activities.spec import AgentSpec
from .config import connect, connect_from_env
from .executor import TemporalExecutor, compact_workflow_id, publish_workflow_id, run_workflow_id
from .mail_client import TemporalUnavailableError
from .purge import delete_session_workflows
from .run_timeout import DEFAULT_EXECUTION_TIMEOUT, ENV_RUN_TIMEOUT
from .search import SEARCH_ATTRIBUTE, ensure_search_attribute
from .store_check import StoreMismatchError
from .worker import WORKFLOWS, create_worker

__all__ = [
    "DEFAULT_EXECUTION_TIMEOUT",
    "ENV_RUN_TIMEOUT",
    "SEARCH_ATTRIBUTE",
    "WORKFLOWS",
    "AgentSpec",
    "RunResult",
    "RunState",
    "StoreMismatchError",
    "TemporalExecutor",
    "TemporalUnavailableError",
    "Timeouts",
    "compact_workflow_id",
    "connect",
    "connect_from_env",
    "create_worker",
    "delete_session_workflows",
    "ensure_search_attribute",
    "publish_workflow_id",
    "run_workflow_id",
]
