"""The ``call_model`` activity: one model reply, streamed live, committed under its stamp.

The reply streams to the live-delta channel (docs/design.md#live-deltas), never into workflow
history; the activity answers the whole reply. With a stamp (docs/design.md#stamps-and-producers)
it commits the reply itself, so a turn's model leg costs one activity, and a retry that finds its
stamp stored answers that (a first attempt cannot: :func:`.base.is_retry`). The path comes from
what the worker remembers it stored (:class:`~durable_agent.stores.RememberingStore`), so a turn
costs no session load.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from ..agent.options import AgentOptions
from ..ai.messages import Message, with_call_ids
from ..ai.model import ModelError, ModelRequest
from ..durable.engine import aborted_message
from ..durable.live import DeltaWriter, clear_later, writer_for
from ..session.codec import decode_entry
from ..session.deltas import DeltaKey
from ..session.entries import Entry, MessageEntry
from ..session.views import model_view
from .base import CALL_GRACE, ActivityBase, find_entry, heartbeating, is_retry, stored_message
from .failures import application_error
from .spec import AgentSpec
from .types import CallModelInput, ModelReply, stored_times

__all__ = ["ModelActivity", "run_view"]


class ModelActivity(ActivityBase):
    """``durable_agent.call_model``."""

    @activity.defn(name="durable_agent.call_model")
    async def call_model(self, inp: CallModelInput) -> ModelReply:
        """Stream one model reply from the view at the leaf; on cancellation return what was
        streamed so far as an ``aborted`` message."""
        spec = self.agent_spec(inp.agent)
        options = spec.options(inp.options)
        # heartbeats from the first store read on: a read that is slow under load (seconds on a
        # busy FerretDB) would otherwise outlast the heartbeat timeout and fail the attempt
        async with heartbeating(CALL_GRACE):
            if inp.stamp is not None and is_retry():
                stored = find_entry(await self.stored_entries(inp.session_id), inp.stamp.id)
                if stored is not None:
                    # committed by an earlier attempt (crash between commit and completion, or
                    # a zombie that won the race): no second model call
                    self.clear_deltas(inp)
                    return _stored_reply(stored)
            request = self._request(options, inp, await self.path_to(inp.session_id, inp.leaf_id))
            final, cancelled, live = await self._stream(spec, inp, request)
        # the reply's last deltas go out while it is committed: a client sees the reply's
        # receipt only after this activity returns, and by then both are done
        finishing = None if live is None else asyncio.ensure_future(live.finish(final))
        if inp.stamp is None or cancelled:
            if finishing is not None:
                await finishing  # best effort and bounded (DeltaWriter.finish)
            # a cancelled partial is stored by the workflow's cancel path, as in-process
            return ModelReply(message=final, cancelled=cancelled)
        commit = asyncio.ensure_future(self.commit(inp.session_id, inp.stamp, final))
        try:
            await asyncio.shield(commit)
            # the deltas' last write (no fsync) has usually finished by now: no extra hop then
            if finishing is not None and not finishing.done():
                await asyncio.shield(finishing)
            return _stored_reply(commit.result())
        except asyncio.CancelledError:
            # the run was cancelled while the reply was being written: a started write
            # completes (SPEC §2.1) and gets its receipt before the cancellation proceeds
            return _stored_reply(await commit, cancelled=True)

    def _request(self, options: AgentOptions, inp: CallModelInput, p: list[Entry]) -> ModelRequest:
        """The model's request: the view of path ``p`` with this run's ephemeral inputs."""
        combined = _with_ephemeral(p, [decode_entry(w) for w in inp.ephemeral])
        return ModelRequest(
            system_prompt=options.system_prompt,
            messages=run_view(combined, inp.start_leaf_id),
            tools=[t.spec for t in options.tools],
            options=dict(options.model_options),
        )

    async def _stream(
        self, spec: AgentSpec, inp: CallModelInput, request: ModelRequest
    ) -> tuple[Message, bool, DeltaWriter | None]:
        """The complete reply (checked against the payload limit), whether it is the partial
        one a cancellation cut short, and the writer whose last deltas the caller finishes."""
        partial: Message | None = None
        final: Message | None = None
        cancelled = False
        live = writer_for(
            self.deltas, inp.session_id, inp.run_id, inp.position, activity.info().attempt
        )
        try:
            # the caller's background beat proves liveness (and brings cancellation) every half
            # second: a heartbeat per streamed token would only add a task and an encode per token
            async for event in spec.model.stream(request):
                partial = event.partial
                if live is not None:
                    live.offer(partial)
                if event.type == "done":
                    final = event.message
        except asyncio.CancelledError:
            aborted = aborted_message(partial)
            if aborted is None:
                raise
            final, cancelled = aborted, True
        except ModelError as exc:
            self.clear_deltas(inp, unless_retried=exc.retryable)
            # no cause chain: a provider's own exception may hold the request and its headers
            raise application_error(exc) from None
        except Exception as exc:
            # Not a ModelError, so nobody stripped credentials from its message: Temporal gets
            # only its type (the worker's log keeps the rest).
            activity.logger.warning("model call failed with %s", type(exc).__name__, exc_info=True)
            self.clear_deltas(inp)
            raise application_error(
                ModelError(f"model call failed: {type(exc).__name__}", retryable=False)
            ) from None
        finally:
            if live is not None:
                live.stop()
        if final is None:
            raise application_error(
                ModelError("model stream ended without a complete message", retryable=True)
            )
        # the stamp's entry ID seeds the IDs of calls that came without one (issue 16 item 7)
        final = with_call_ids(final, None if inp.stamp is None else inp.stamp.id)
        self.check_size("model reply", final.model_dump_json())
        self.clear_deltas(inp)  # after the grace period, when the reply is long stored
        return final, cancelled, live

    def clear_deltas(self, inp: CallModelInput, *, unless_retried: bool = False) -> None:
        """Drop the reply's live deltas after the grace period; ``unless_retried``: only if this
        was the last attempt (a retry's client still reads the same key)."""
        if self.deltas is None or not inp.run_id:
            return
        if unless_retried:
            info = activity.info()
            most = info.retry_policy.maximum_attempts if info.retry_policy else 0
            if most == 0 or info.attempt < most:
                return
        clear_later(self.deltas, DeltaKey(inp.session_id, inp.run_id, inp.position))


def _stored_reply(entry: Entry, *, cancelled: bool = False) -> ModelReply:
    stored = stored_message(entry, "model call")
    return ModelReply(message=stored.message, cancelled=cancelled, stored=stored_times(stored))


def run_view(path: list[Entry], start_leaf_id: str | None) -> list[Message]:
    """What the model sees mid-run, exactly as in-process: the model view of the history at the
    run's starting leaf, then this run's messages in order (input, ephemeral, produced), without
    the stored repair results the history view already projects."""
    if start_leaf_id is None:
        return model_view(path)
    cut = -1
    if start_leaf_id:
        for i, entry in enumerate(path):
            if entry.id == start_leaf_id:
                cut = i
                break
    history = model_view(path[: cut + 1])
    tail = [e.message for e in path[cut + 1 :] if isinstance(e, MessageEntry) and not e.synthetic]
    return [*history, *tail]


def _with_ephemeral(path: list[Entry], ephemeral: list[Entry]) -> list[Entry]:
    """Place each ephemeral input after the path entry its parent names (first if ``None``)."""
    if not ephemeral:
        return path
    out: list[Entry] = []
    by_parent: dict[str | None, list[Entry]] = {}
    for e in ephemeral:
        by_parent.setdefault(e.parent_id, []).append(e)
    out.extend(by_parent.pop(None, []))
    for entry in path:
        out.append(entry)
        out.extend(by_parent.pop(entry.id, []))
    return out
