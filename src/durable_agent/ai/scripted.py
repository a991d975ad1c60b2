"""ScriptedModel: a deterministic, streaming model that replays a script.

It is a real :class:`~durable_agent.ai.model.LanguageModel`: it streams deltas like a provider,
reports usage and stop reasons, fails on cue with :class:`ModelError`, and records every request it
receives. Tests and the offline demo run on it. A script is either a list of replies consumed in
order, or a function of the request (which keeps a worker that restarts mid-conversation answering
the same way).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .messages import (
    ContentBlock,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from .model import ModelError, ModelEvent, ModelRequest
from .timefmt import utc_now

__all__ = ["Reply", "ScriptedModel"]


class Reply(BaseModel):
    """One scripted model reply.

    ``error`` alone fails the call at once; with ``text`` the text streams first, then the call
    fails (a stream cut mid-message). ``delay`` waits before the first delta and ``chunk_delay``
    between deltas, both cancellable.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    text: str = ""
    thinking: str = ""
    thinking_signature: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    error: ModelError | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int = 8
    usage: Usage | None = None
    stop_reason: StopReason | None = None

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any] | None = None, *, id: str) -> Reply:
        """A reply with one tool call and no text."""
        return cls(tool_calls=[ToolCall(id=id, name=name, arguments=arguments or {})])


Responder = Callable[[ModelRequest], Reply]


def _outcome(reply: Reply, request: ModelRequest) -> tuple[Usage, StopReason]:
    """The reply's usage (estimated from the text unless scripted) and why it stopped."""
    usage = reply.usage or Usage(
        input=_estimate_tokens(request), output=len(reply.text + reply.thinking) // 4 + 1
    )
    stop: StopReason = reply.stop_reason or (
        "tool_use" if any(not c.server for c in reply.tool_calls) else "stop"
    )
    return usage, stop


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(size, 1))] if text else []


def _estimate_tokens(request: ModelRequest) -> int:
    chars = len(request.system_prompt) + sum(len(m.text()) for m in request.messages)
    return chars // 4 + 1


class ScriptedModel:
    """Replays ``script`` (a list of replies, or a function of the request), streaming each."""

    def __init__(
        self,
        script: Sequence[Reply | str] | Responder,
        *,
        provider: str = "scripted",
        model: str = "scripted-1",
    ) -> None:
        self._responder: Responder | None = None
        self._replies: list[Reply] = []
        if callable(script):
            self._responder = script
        else:
            self._replies = [Reply(text=r) if isinstance(r, str) else r for r in script]
        self._position = 0
        self.provider = provider
        self.model = model
        self.requests: list[ModelRequest] = []
        """Every request received, in order (retries included)."""

    @property
    def remaining(self) -> int:
        """Replies not yet used (list scripts only)."""
        return len(self._replies) - self._position

    def _next_reply(self, request: ModelRequest) -> Reply:
        if self._responder is not None:
            return self._responder(request)
        if self._position >= len(self._replies):
            raise ModelError(
                f"scripted model exhausted after {len(self._replies)} replies", retryable=False
            )
        reply = self._replies[self._position]
        self._position += 1
        return reply

    def _message(self, blocks: list[ContentBlock], **extra: Any) -> Message:
        return Message(
            role="assistant",
            content=list(blocks),
            api="scripted",
            provider=self.provider,
            model=self.model,
            timestamp=utc_now(),
            **extra,
        )

    @staticmethod
    def _partial(start: Message, blocks: list[ContentBlock]) -> Message:
        """A partial reply: the stream's start message with the blocks so far, copied without
        validation (its blocks come from a validated :class:`Reply`; the final message is
        validated) and stamped with the stream's start time, as every partial of one reply is:
        a streaming model builds one per delta, which a benchmark's model should do cheaply,
        and a live-delta writer then has only the content to patch."""
        return start.model_copy(update={"content": blocks})

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        reply = self._next_reply(request)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None and not reply.text:
            raise reply.error
        blocks: list[ContentBlock] = []
        start = self._message(blocks)
        yield ModelEvent(type="start", partial=start)
        pause = reply.chunk_delay
        if reply.thinking:
            acc = ""
            for piece in _chunks(reply.thinking, reply.chunk_size):
                acc += piece
                current = ThinkingContent.model_construct(
                    thinking=acc, signature=reply.thinking_signature
                )
                if pause:
                    await asyncio.sleep(pause)
                yield ModelEvent(
                    type="thinking_delta",
                    partial=self._partial(start, [*blocks, current]),
                    delta=piece,
                )
            blocks.append(ThinkingContent(thinking=acc, signature=reply.thinking_signature))
        if reply.text:
            acc = ""
            for piece in _chunks(reply.text, reply.chunk_size):
                acc += piece
                if pause:
                    await asyncio.sleep(pause)
                yield ModelEvent(
                    type="text_delta",
                    partial=self._partial(start, [*blocks, TextContent.model_construct(text=acc)]),
                    delta=piece,
                    index=len(blocks),
                )
            blocks.append(TextContent(text=acc))
        if reply.error is not None:
            raise reply.error
        for call in reply.tool_calls:
            args_json = json.dumps(call.arguments)
            for piece in _chunks(args_json, reply.chunk_size * 4):
                if pause:
                    await asyncio.sleep(pause)
                partial_call = ToolCall.model_construct(id=call.id, name=call.name)
                yield ModelEvent(
                    type="tool_call_delta",
                    partial=self._partial(start, [*blocks, partial_call]),
                    delta=piece,
                    index=len(blocks),
                )
            blocks.append(call)
        usage, stop = _outcome(reply, request)
        yield ModelEvent(type="done", partial=self._message(blocks, usage=usage, stop_reason=stop))
