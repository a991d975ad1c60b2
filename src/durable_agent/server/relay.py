"""What a run this server process started tells its session's streams, from the run's own event
stream: in process the engine's events, on Temporal the events its handle derives from the store
(docs/design.md#receipts). A run's events are its own: its live text comes with the parent of the
reply it grows, its receipts move its own leaf, so two runs streaming at once on one session
(``on_busy: sibling``) never mix (docs/design.md#http-api).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..durable.agent import Agent
from ..durable.errors import RunCancelledError
from ..durable.persist import is_durable
from ..durable.stream import RunStream
from ..session.approvals import ApprovalDecision, ApprovalRequest
from ..session.entries import Entry, MessageEntry

if TYPE_CHECKING:  # runs.py starts relays
    from .runs import RunListener, Status

__all__ = ["RunRelay"]

logger = logging.getLogger("durable_agent.server")


class RunRelay:
    """Reads one run's events and tells ``listener`` its live text (with the reply's parent),
    that it stored entries, its waits for people, and its end with its last stored entry."""

    def __init__(
        self, listener: RunListener, handle: Agent, stream: RunStream, run_id: str
    ) -> None:
        self.listener = listener
        self.handle = handle
        self.stream = stream
        self.run_id = run_id
        self.asked = {p.tool_call_id for p in handle.pending_approvals()}
        """The calls the run waits for a decision on: those waiting when it started (made
        before the run starts), then as its events tell (the handle's own state runs ahead of
        the events read: it takes each receipt as it arrives)."""
        self.status: Status = "awaiting_approval" if self.asked else "started"
        """What the run does now (``awaiting_approval`` while calls wait for people)."""
        self.error: Exception | None = None
        """Why the run failed, once it did."""
        self.begun = len(handle.state.log)
        """Where the run's own entries start in the handle's log (a reply stored before, a
        retry's sibling under the same parent, is not the run's)."""

    def _reply_to(self, parent: str) -> str:
        """The ID of the run's stored reply under ``parent``, if the handle has it already:
        the handle takes each receipt before the run's stream gives the reply's last live
        text (in process at its commit, on Temporal as its stream reads it), so that text may
        reach the hub after the hub read the reply itself (docs/design.md#http-api)."""
        log = self.handle.state.log
        for entry in reversed(log[self.begun :]):
            is_reply = isinstance(entry, MessageEntry) and entry.message.role == "assistant"
            if is_reply and (entry.parent_id or "") == parent:
                return entry.id
        return ""

    def _waits(self, entries: list[Entry]) -> None:
        """The run's waits after its request and decision entries ``entries``."""
        for entry in entries:
            if isinstance(entry, ApprovalRequest):
                self.asked.add(entry.tool_call_id)
            elif isinstance(entry, ApprovalDecision):
                self.asked.discard(entry.tool_call_id)
        self.status = "awaiting_approval" if self.asked else "started"

    async def run(self) -> tuple[Status, str]:
        """Relay the run's events until it ends; how it ended and the last entry its events
        told stored (its caller tells the end: on Temporal the run's own account names its
        last entry, which a stream that lost a read may not have told)."""
        sid, run_id, listener = self.handle.session_id, self.run_id, self.listener
        leaf = self.handle.leaf_id
        last = ""  # the run's last stored entry: its streams show it before the run's end
        status: Status = "completed"
        try:
            async for event in self.stream.events():
                inner = event.agent
                stored = [e.id for e in event.entries or [] if is_durable(e)]
                last = stored[-1] if stored else last
                if event.leaf_id is not None:
                    leaf = event.leaf_id
                    listener.stored(sid, stored, run_id)
                if inner is None:
                    continue
                if inner.type == "message_update":
                    text = inner.delta if inner.delta is not None else ""
                    reply = self._reply_to(leaf)  # stored already: the hub may have shown it
                    listener.run_delta(sid, run_id, leaf, text, bool(inner.restart), reply)
                elif inner.type in ("approval_requested", "approval_decided"):
                    self._waits(event.entries or [])
                    listener.run_status(sid, run_id, self.status)
        except RunCancelledError:
            status = "cancelled"
        except Exception as exc:
            logger.info("run %s of %s failed: %s", run_id, sid, type(exc).__name__)
            status, self.error = "failed", exc
        finally:
            listener.stored(sid)
        self.status = status
        return status, last
