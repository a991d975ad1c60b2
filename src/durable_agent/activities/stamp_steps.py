"""A producer the run gave up on: its stamp, not the failure, says what happened
(docs/design.md#stamps-and-producers).

A model or tool call commits its output under the stamp the run reserved, then completes. Its
last allowed attempt can store the output and still fail: the worker dies between the commit and
the completion, or the start-to-close timeout fires while a slow store acknowledges the write.
Temporal then reports a failure, although the output is stored. Taking that failure as the
answer would contradict the store: a tool that ran would be answered ``tool execution failed``
under a new ID (its real result left on a dead branch), a reply that is stored would fail the run.

So the run settles the stamp with one local activity: for a tool, ``settle_stamp`` stores the
failure result *under the call's stamp*, where the first writer wins (a stored result stays and
is what the activity returns); for a model call, ``settled_reply`` looks the stamp up, and a
stored reply is taken as the call's answer, with the approval requests stored with it (a call
that waits for a person still waits). Only then does a failure stand. A later zombie attempt
that commits under the same stamp meets the settled entry and returns it, so every attempt
agrees.
"""

from __future__ import annotations

from temporalio import activity

from ..ai.messages import Message
from ..durable.persist import Header
from ..session.approvals import ApprovalRequest, request_entry_id
from ..session.entries import MessageEntry
from .base import ActivityBase, find_entry, heartbeating, stored_message
from .contracts import ModelReply, SettleInput, Timeouts
from .store_steps import local_step

__all__ = ["StampSteps", "settle_stamp", "settled_reply"]


class StampSteps(ActivityBase):
    """``settle_stamp`` and ``settled_reply``."""

    @activity.defn(name="durable_agent.settle_stamp")
    async def settle_stamp(self, inp: SettleInput) -> MessageEntry:
        """What the store holds under ``inp.stamp`` after this call: ``inp.message`` committed
        there unless an entry was stored first (then that entry)."""
        if inp.message is None:
            raise ValueError("settle_stamp needs the failure result to store")
        async with heartbeating():
            return await self.commit(inp.session_id, inp.stamp, inp.message, "tool result")

    @activity.defn(name="durable_agent.settled_reply")
    async def settled_reply(self, inp: SettleInput) -> ModelReply | None:
        """The reply a given-up model call stored under ``inp.stamp`` and the approval requests
        stored with it (in call order), or ``None``."""
        async with heartbeating():
            entries = await self.stored_entries(inp.session_id)
        stored = find_entry(entries, inp.stamp.id)
        if stored is None:
            return None
        reply = stored_message(stored, "given-up call")
        asked = {request_entry_id(reply.id, c.id) for c in reply.message.tool_calls()}
        requests = [e for e in entries if isinstance(e, ApprovalRequest) and e.id in asked]
        return ModelReply(entry=reply, requests=requests)


async def settle_stamp(
    session_id: str, stamp: Header, message: Message, t: Timeouts
) -> MessageEntry:
    """Schedule ``settle_stamp`` as a local activity (workflow side). Its own failure (the store
    down through every retry) is an ``ActivityError``, which fails the run as a commit would."""
    inp = SettleInput(session_id=session_id, stamp=stamp, message=message)
    stored: MessageEntry = await local_step(
        StampSteps.settle_stamp, inp, t, "store a given-up call's result"
    )
    return stored


async def settled_reply(session_id: str, stamp: Header, t: Timeouts) -> ModelReply | None:
    """Schedule ``settled_reply`` as a local activity (workflow side), as :func:`settle_stamp`."""
    inp = SettleInput(session_id=session_id, stamp=stamp)
    found: ModelReply | None = await local_step(
        StampSteps.settled_reply, inp, t, "look up a given-up model call"
    )
    return found
