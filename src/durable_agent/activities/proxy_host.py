"""What the activity-backed model and tool proxies need of the run that owns them.

The proxies (:mod:`.model_proxy`, :mod:`.tool_proxy`) run inside the run workflow and talk to it
through this small public protocol only, never through the workflow's private state: the
workflow implements it, and a proxy can be read (and tested) without knowing the workflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..ai.messages import Message
from ..durable.engine import RunEngine
from ..durable.errors import PayloadTooLargeError
from .types import CallModelInput, StoredTimes, Timeouts

__all__ = ["RunHost"]


class RunHost(Protocol):
    """The run a proxy serves (implemented by ``RunWorkflow``)."""

    @property
    def engine(self) -> RunEngine:
        """The run's engine (leaf, pending calls, produced messages, receipts)."""
        ...

    @property
    def session_id(self) -> str: ...

    @property
    def agent(self) -> str: ...

    @property
    def timeouts(self) -> Timeouts: ...

    @property
    def options(self) -> Mapping[str, Any]:
        """The run's plain options (``model_retry``, ``max_turns``, …)."""
        ...

    def patched(self, patch_id: str) -> bool:
        """Whether this execution takes the path of ``patch_id`` (``workflow.patched`` for
        executions from before ``local-store-v1``; always, without a marker, after it)."""
        ...

    def model_call(self) -> CallModelInput:
        """The next ``call_model`` input (the view's leaf, the ephemeral inputs, the live key)."""
        ...

    def producer_committed(
        self,
        entry_id: str,
        stored: StoredTimes,
        tool_call_id: str | None = None,
        *,
        landed: Message | None = None,
    ) -> None:
        """A producing activity stored ``entry_id`` (its reply, or that call's result): the
        engine's commit of it records the receipt without another ``append_entries``."""
        ...

    def defer_cancel(self) -> None:
        """The run was cancelled while a producer stored its output: record that first, then
        let the cancellation proceed."""
        ...

    def keep_aborted(self, reply: Message) -> None:
        """The partial reply a cancelled model call returned, for the run's cancel path."""
        ...

    def fail_turn(self, error: PayloadTooLargeError) -> None:
        """Fail the run with ``error`` once the current turn's calls are answered (the first
        such error wins)."""
        ...
