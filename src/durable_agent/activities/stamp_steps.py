"""A producer the run gave up on: its stamp, not the failure, says what happened
(docs/design.md#stamps-and-producers).

A model or tool call commits its output under the stamp the run reserved, then completes. Its
last allowed attempt can store the output and still fail: the worker dies between the commit and
the completion, or the start-to-close timeout fires while a slow store acknowledges the write.
Temporal then reports a failure, although the output is stored. Taking that failure as the
answer would contradict the store: a tool that ran would be answered ``tool execution failed``
under a new ID (its real result left on a dead branch), a reply that is stored would fail the run.

So the run settles the stamp with one local activity, ``settle_stamp``: for a tool it stores the
failure result *under the call's stamp*, where the first writer wins (a stored result stays and
is what the activity returns); for a model call it looks the stamp up, and a stored reply is
taken as the call's answer. Only then does a failure stand. A later zombie attempt that commits
under the same stamp meets the settled entry and returns it, so every attempt agrees.
"""

from __future__ import annotations

from temporalio import activity

from ..ai.messages import Message
from ..durable.persist import Header
from ..session.entries import MessageEntry
from .base import ActivityBase, find_entry, heartbeating, stored_message
from .contracts import SettleInput, Timeouts
from .store_steps import local_step

__all__ = ["StampSteps", "settle_stamp"]


class StampSteps(ActivityBase):
    """``settle_stamp``."""

    @activity.defn(name="durable_agent.settle_stamp")
    async def settle_stamp(self, inp: SettleInput) -> MessageEntry | None:
        """What the store holds under ``inp.stamp`` after this call: ``inp.message`` committed
        there unless an entry was stored first (then that entry); without a message, the stored
        entry or ``None``."""
        async with heartbeating():
            if inp.message is not None:
                return await self.commit(inp.session_id, inp.stamp, inp.message, "tool result")
            stored = find_entry(await self.stored_entries(inp.session_id), inp.stamp.id)
        return None if stored is None else stored_message(stored, "given-up call")


async def settle_stamp(
    session_id: str, stamp: Header, message: Message | None, t: Timeouts
) -> MessageEntry | None:
    """Schedule ``settle_stamp`` as a local activity (workflow side). Its own failure (the store
    down through every retry) is an ``ActivityError``, which fails the run as a commit would."""
    what = "look up a given-up call" if message is None else "store a given-up call's result"
    inp = SettleInput(session_id=session_id, stamp=stamp, message=message)
    stored: MessageEntry | None = await local_step(StampSteps.settle_stamp, inp, t, what)
    return stored
