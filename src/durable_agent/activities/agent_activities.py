"""The Temporal activities: every side effect of a durable run.

Activities read the active path from the store by ``(session_id, leaf_id)`` instead of receiving
the transcript, so workflow history stays bounded. Errors leave as ``ApplicationError`` with the
original exception's type name, which decides retries (only ``StoreUnavailableError`` among store
errors, only retryable ``ModelError``s among model errors) and lets the client re-raise the same
error type.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..agent.loop import ModelLoop
from ..agent.options import AgentOptions
from ..agent.tool_exec import failure_text, unknown_tool_result
from ..ai.messages import (
    Message,
    ToolCall,
    encodable_text,
    error_tool_result_message,
    tool_result_message,
    with_call_ids,
)
from ..ai.model import ModelError, ModelRequest
from ..ai.redaction import configured_secrets, redact
from ..ai.timefmt import parse_time
from ..ai.tools import ToolContext
from ..durable.compaction import plan_compaction, summarize
from ..durable.engine import aborted_message
from ..durable.errors import CompactError, PayloadTooLargeError, PersistError
from ..durable.limits import PAYLOAD_LIMIT
from ..durable.publisher import PublisherLike, publish_one
from ..session.codec import decode_entry, encode_entry
from ..session.entries import Entry, MessageEntry
from ..session.errors import (
    EntryConflictError,
    EntryTooLargeError,
    SessionError,
    StoreUnavailableError,
)
from ..session.repair import start_repairs
from ..session.store import Store, open_session
from ..session.tree import path as tree_path
from ..session.views import model_view, raw_model_view
from ..streaming import DeltaKey, LiveDeltas, clear_later, resolve, writer_for
from .reset_leaf import recorded_start_leaf
from .spec import AgentSpec
from .types import (
    AppendInput,
    AppendResult,
    CallModelInput,
    CallToolInput,
    EnsureSessionInput,
    LoadPathInput,
    ModelReply,
    PathInfo,
    PublishInput,
    Stamp,
    SummarizeInput,
    SummaryResult,
    ToolInfo,
    ToolReply,
    decode_entries,
    stored_times,
)
from .wire import event_from_wire

__all__ = ["DEFAULT_PAYLOAD_LIMIT", "AgentActivities", "application_error"]

DEFAULT_PAYLOAD_LIMIT = PAYLOAD_LIMIT  # the one limit (durable/limits.py)
HEARTBEAT_EVERY = 0.5
STORE_GRACE = 0.5
"""Seconds a store activity runs before it starts heartbeating."""


def application_error(exc: BaseException, *, non_retryable: bool | None = None) -> ApplicationError:
    """Wrap ``exc`` for Temporal, keeping its type name; secrets never appear because only the
    message (sanitized by providers, then redacted of the worker environment's keys) is kept."""
    retryable = isinstance(exc, StoreUnavailableError) or (
        isinstance(exc, ModelError) and exc.retryable
    )
    details: list[Any] = []
    next_delay: timedelta | None = None
    if isinstance(exc, ModelError):
        details = [exc.retryable]
        if exc.retry_after:
            next_delay = timedelta(seconds=exc.retry_after)
    return ApplicationError(
        redact(encodable_text(str(exc)), configured_secrets(os.environ)),
        *details,
        type=type(exc).__name__,
        non_retryable=(not retryable) if non_retryable is None else non_retryable,
        next_retry_delay=next_delay,
    )


@contextlib.asynccontextmanager
async def _heartbeating(grace: float = 0.0) -> AsyncIterator[None]:
    """Heartbeat in the background, so a crashed worker is noticed within the heartbeat timeout
    even while a model has not produced its first token or a tool is busy.

    ``grace`` delays the first beat (capped at a quarter of the heartbeat timeout), so a quick
    store call finishes without any heartbeat RPC while a slow or stuck one still beats."""

    async def beat() -> None:
        if grace:
            timeout = activity.info().heartbeat_timeout
            limit = timeout.total_seconds() / 4 if timeout else grace
            await asyncio.sleep(min(grace, limit))
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_EVERY)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class AgentActivities:
    """Activities bound to one worker's store, named agents and publisher."""

    def __init__(
        self,
        store: Store,
        agents: Mapping[str, AgentSpec],
        publisher: PublisherLike | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        live_deltas: LiveDeltas = "auto",
    ) -> None:
        self.store = store
        self.agents = dict(agents)
        self.publisher = publisher
        self.payload_limit = payload_limit
        self.deltas = resolve(live_deltas, store)
        """Where ``call_model`` publishes its streaming reply (no workflow history, issue 13)."""

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

    # -- helpers -----------------------------------------------------------------------------

    def _spec(self, name: str) -> AgentSpec:
        spec = self.agents.get(name)
        if spec is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ApplicationError(
                f"unknown agent {name!r} (this worker has: {known})",
                type="UnknownAgentError",
                non_retryable=True,
            )
        return spec

    async def _entries(self, session_id: str) -> list[Entry]:
        try:
            return await self.store.load_entries(session_id)
        except SessionError as exc:
            raise application_error(exc) from exc

    async def _path(self, session_id: str, leaf_id: str) -> list[Entry]:
        return self._path_in(session_id, await self._entries(session_id), leaf_id)

    def _path_in(self, session_id: str, entries: list[Entry], leaf_id: str) -> list[Entry]:
        index = {e.id: e for e in entries}
        if leaf_id and leaf_id not in index:
            raise ApplicationError(
                f"leaf {leaf_id!r} is not an entry of session {session_id!r}",
                type="EntryNotFoundError",
                non_retryable=True,
            )
        return tree_path(index, leaf_id)

    def _check_size(self, what: str, payload: str) -> None:
        size = len(payload.encode("utf-8"))
        if size > self.payload_limit:
            raise application_error(
                PayloadTooLargeError(
                    f"{what} is {size} bytes, over the {self.payload_limit}-byte payload limit"
                ),
                non_retryable=True,
            )

    # -- activities --------------------------------------------------------------------------

    @activity.defn(name="durable_agent.ensure_session")
    async def ensure_session(self, inp: EnsureSessionInput) -> str:
        """Create the session if absent; return its last appended entry ID (``""`` if empty).
        An unknown agent fails first, so it creates nothing."""
        self._spec(inp.agent)
        session_id = inp.session_id
        try:
            async with _heartbeating(STORE_GRACE):
                entries = await open_session(self.store, session_id)
        except SessionError as exc:
            raise application_error(exc) from exc
        workflow_id = activity.info().workflow_id
        if inp.reset_of and workflow_id:
            # a reset retries the run from where it started, not from the newest entry now
            leaf = await recorded_start_leaf(workflow_id, inp.reset_of)
            if leaf is not None and (leaf == "" or any(e.id == leaf for e in entries)):
                return leaf
        return entries[-1].id if entries else ""

    @activity.defn(name="durable_agent.load_path")
    async def load_path(self, inp: LoadPathInput) -> PathInfo:
        """Check the leaf and the agent before the run writes anything; return the repairs."""
        spec = self._spec(inp.agent)
        async with _heartbeating(STORE_GRACE):
            p = await self._path(inp.session_id, inp.leaf_id)
        repairs = start_repairs(raw_model_view(p))
        tools = [
            ToolInfo(
                name=t.name,
                parallel_safe=t.parallel_safe,
                max_attempts=t.retry.max_attempts,
                initial_interval=t.retry.initial_interval,
                backoff=t.retry.backoff,
                max_interval=t.retry.max_interval,
                non_retryable=list(t.retry.non_retryable),
                timeout=t.timeout,
            )
            for t in spec.tools
        ]
        turns = sum(1 for e in p if isinstance(e, MessageEntry) and e.message.role == "assistant")
        return PathInfo(
            repairs=[e.message for e in repairs],
            turn_count=turns,
            tools=tools,
            max_turns=spec.max_turns,
        )

    @activity.defn(name="durable_agent.append_entries")
    async def append_entries(self, inp: AppendInput) -> AppendResult:
        """Store entries the workflow stamped; retry-safe because appends are idempotent by ID.
        Returns the stored times (see :class:`AppendResult`)."""
        entries = decode_entries(inp.entries)
        try:
            async with _heartbeating(STORE_GRACE):
                await self.store.append_entries(inp.session_id, entries)
        except SessionError as exc:
            raise application_error(exc) from exc
        return AppendResult(times=[stored_times(e) for e in entries])

    @activity.defn(name="durable_agent.call_model")
    async def call_model(self, inp: CallModelInput) -> ModelReply:
        """Stream one model reply from the view at the leaf; on cancellation return what was
        streamed so far as an ``aborted`` message."""
        spec = self._spec(inp.agent)
        options = spec.options(inp.options)
        entries = await self._entries(inp.session_id)
        if inp.stamp is not None:
            stored = _find(entries, inp.stamp.id)
            if stored is not None:
                # committed by an earlier attempt (crash between commit and completion, or a
                # zombie that won the race): no second model call
                self._clear_deltas(inp)
                return _stored_reply(stored)
        p = self._path_in(inp.session_id, entries, inp.leaf_id)
        combined = _with_ephemeral(p, [decode_entry(w) for w in inp.ephemeral])
        view = run_view(combined, inp.start_leaf_id)
        request = ModelRequest(
            system_prompt=options.system_prompt,
            messages=view,
            tools=[t.spec for t in options.tools],
            options=dict(options.model_options),
        )
        partial: Message | None = None
        final: Message | None = None
        cancelled = False
        live = writer_for(
            self.deltas, inp.session_id, inp.run_id, inp.position, activity.info().attempt
        )
        try:
            async with _heartbeating():
                async for event in spec.model.stream(request):
                    partial = event.partial
                    activity.heartbeat()
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
            self._clear_deltas(inp, unless_retried=exc.retryable)
            # no cause chain: a provider's own exception may hold the request and its headers
            raise application_error(exc) from None
        except Exception as exc:
            # Not a ModelError, so nobody stripped credentials from its message: Temporal gets
            # only its type (the worker's log keeps the rest).
            activity.logger.warning("model call failed with %s", type(exc).__name__, exc_info=True)
            self._clear_deltas(inp)
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
        if live is not None:
            await live.finish(final)  # the whole reply is on the channel before it is stored
        self._check_size("model reply", final.model_dump_json())
        self._clear_deltas(inp)  # after the grace period, when the reply is long stored
        if inp.stamp is None or cancelled:
            # a cancelled partial is stored by the workflow's cancel path, as in-process
            return ModelReply(message=final, cancelled=cancelled)
        commit = asyncio.ensure_future(self._commit(inp.session_id, inp.stamp, final))
        try:
            return _stored_reply(await asyncio.shield(commit))
        except asyncio.CancelledError:
            # the run was cancelled while the reply was being written: a started write
            # completes (SPEC §2.1) and gets its receipt before the cancellation proceeds
            return _stored_reply(await commit, cancelled=True)

    def _clear_deltas(self, inp: CallModelInput, *, unless_retried: bool = False) -> None:
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

    async def _commit(
        self, session_id: str, stamp: Stamp, message: Message, what: str = "message"
    ) -> MessageEntry:
        """Append ``message`` under the workflow's stamp and return what the store holds for it:
        a conflicting earlier write (a zombie attempt) wins, so workflow and store agree."""
        entry = MessageEntry(
            id=stamp.id,
            parent_id=stamp.parent_id,
            created_at=parse_time(stamp.created_at),
            message=message,
        )
        self._check_size("entry", encode_entry(entry))
        try:
            async with _heartbeating(STORE_GRACE):
                try:
                    await self.store.append_entries(session_id, [entry])
                    return entry
                except EntryConflictError:
                    stored = _find(await self.store.load_entries(session_id), stamp.id)
        except SessionError as exc:
            retryable = isinstance(exc, StoreUnavailableError)
            raise application_error(
                PersistError(f"persist {what}: {exc}"), non_retryable=not retryable
            ) from exc
        assert isinstance(stored, MessageEntry), "a conflicting entry is stored under the stamp"
        return stored

    @activity.defn(name="durable_agent.call_tool")
    async def call_tool(self, inp: CallToolInput) -> Message | ToolReply:
        """Run one tool call with the worker's handler; failures are retried per the tool's
        policy by Temporal, and the workflow answers an abandoned call itself.

        With a stamp (SPEC §7.2) the result is committed here, under the stamp, and a stamp that
        is already stored (an earlier attempt committed, then crashed or lost the race) is
        returned without running the tool again; a conflicting earlier write wins."""
        spec = self._spec(inp.agent)
        call = ToolCall.model_validate(inp.call)
        if inp.stamp is not None:
            stored = _find(await self._entries(inp.session_id), inp.stamp.id)
            if stored is not None:
                # committed by an earlier attempt: a tool whose result is stored never runs again
                return _tool_reply(stored)
            result = await self._run_tool(spec, call)
            commit = asyncio.ensure_future(self._commit_result(inp.session_id, inp.stamp, result))
            try:
                return _tool_reply(await asyncio.shield(commit))
            except asyncio.CancelledError:
                # cancelled while the result was being written: a started write completes
                # (SPEC §2.1) and the workflow (waiting for this attempt) records it first
                return _tool_reply(await commit)
        return await self._run_tool(spec, call)

    async def _commit_result(self, session_id: str, stamp: Stamp, result: Message) -> MessageEntry:
        """Commit a tool result under its stamp; one the store refuses as too large is answered
        ``tool execution failed: EntryTooLargeError: …`` under the same stamp (SPEC §5.3: the
        call is never left dangling; the same stand-in the engine stores in process)."""
        try:
            return await self._commit(session_id, stamp, result, "tool result")
        except ApplicationError as exc:
            refused = exc.__cause__
            if not isinstance(refused, EntryTooLargeError):
                raise
        stand_in = error_tool_result_message(
            result.tool_call_id or "",
            result.tool_name or "",
            failure_text(refused),
            timestamp=result.timestamp,
        )
        return await self._commit(session_id, stamp, stand_in, "tool result")

    async def _run_tool(self, spec: AgentSpec, call: ToolCall) -> Message:
        tool = spec.tool(call.name)
        if tool is None:
            return unknown_tool_result(call)

        async def report(partial: str) -> None:
            activity.heartbeat(encodable_text(partial[:1000]))

        ctx = ToolContext(tool_call_id=call.id, tool_name=call.name, report=report)
        try:
            async with _heartbeating():
                blocks = await tool.invoke(call.arguments, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            non_retryable = type(exc).__name__ in tool.retry.non_retryable
            # the message becomes the result text (SPEC §5.3); the chain stays on the worker
            raise ApplicationError(  # (a message Temporal cannot encode fails the activity task)
                encodable_text(str(exc)), type=type(exc).__name__, non_retryable=non_retryable
            ) from None
        result = tool_result_message(call.id, call.name, *blocks)
        self._check_size(f"result of tool {call.name!r}", result.model_dump_json())
        return result

    @activity.defn(name="durable_agent.summarize")
    async def summarize(self, inp: SummarizeInput) -> SummaryResult | None:
        """Plan and run a compaction's summarizer from the store (SPEC §4.8 steps 2-7)."""
        spec = self._spec(inp.agent)
        p = await self._path(inp.session_id, inp.leaf_id)
        plan = plan_compaction(p, inp.keep_turns)
        if plan is None:
            return None
        options = spec.options(inp.options)

        def factory(opts: AgentOptions) -> ModelLoop:
            return ModelLoop(spec.model, opts)

        try:
            async with _heartbeating():
                text = await summarize(factory, options, plan.prefix, inp.prompt)
        except CompactError as exc:
            cause = exc.__cause__
            retryable = isinstance(cause, ModelError) and cause.retryable
            raise application_error(exc, non_retryable=not retryable) from None
        return SummaryResult(
            summary=text, first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before
        )

    @activity.defn(name="durable_agent.publish")
    async def publish(self, inp: PublishInput) -> None:
        """Hand events to the worker's publisher, at least once (consumers dedupe by key)."""
        if self.publisher is None:
            return
        async with _heartbeating(STORE_GRACE):
            for wire in inp.events:
                await publish_one(self.publisher, event_from_wire(wire))


def _find(entries: list[Entry], entry_id: str) -> Entry | None:
    for entry in reversed(entries):
        if entry.id == entry_id:
            return entry
    return None


def _stored_reply(entry: Entry, *, cancelled: bool = False) -> ModelReply:
    if not isinstance(entry, MessageEntry):
        raise ApplicationError(
            f"entry {entry.id!r} under the model call's stamp is not a message",
            type="EntryConflictError",
            non_retryable=True,
        )
    return ModelReply(message=entry.message, cancelled=cancelled, stored=stored_times(entry))


def _tool_reply(entry: Entry) -> ToolReply:
    if not isinstance(entry, MessageEntry):
        raise ApplicationError(
            f"entry {entry.id!r} under the tool call's stamp is not a message",
            type="EntryConflictError",
            non_retryable=True,
        )
    return ToolReply(message=entry.message, stored=stored_times(entry))


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
