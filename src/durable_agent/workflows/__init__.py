"""The Temporal executor: workflows, the worker factory and the client-side executor.

Requires the ``temporal`` extra (``temporalio``).
"""

from ..activities.spec import AgentSpec
from .config import connect, connect_from_env
from .executor import TemporalExecutor, compact_workflow_id, publish_workflow_id, run_workflow_id
from .run_timeout import DEFAULT_EXECUTION_TIMEOUT, ENV_RUN_TIMEOUT
from .types import SEARCH_ATTRIBUTE, RunResult, RunState, Timeouts
from .worker import WORKFLOWS, create_worker, ensure_search_attribute

__all__ = [
    "DEFAULT_EXECUTION_TIMEOUT",
    "ENV_RUN_TIMEOUT",
    "SEARCH_ATTRIBUTE",
    "WORKFLOWS",
    "AgentSpec",
    "RunResult",
    "RunState",
    "TemporalExecutor",
    "Timeouts",
    "compact_workflow_id",
    "connect",
    "connect_from_env",
    "create_worker",
    "ensure_search_attribute",
    "publish_workflow_id",
    "run_workflow_id",
]
