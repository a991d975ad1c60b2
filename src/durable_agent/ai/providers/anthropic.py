"""Anthropic Messages as a :class:`~durable_agent.ai.model.LanguageModel`.

Built on the official ``anthropic`` SDK (the ``anthropic`` extra). Thinking blocks keep their
signatures, because the API verifies them when a conversation that used tools is continued; a
``redacted_thinking`` block is kept as a :class:`~durable_agent.ai.messages.ThinkingContent` with
empty text and ``signature = REDACTED_THINKING_PREFIX + data``, and sent back as it came.

Retries are the caller's: the SDK client is built with ``max_retries=0``, so a failed call
surfaces at once as a :class:`~durable_agent.ai.model.ModelError` whose ``retryable`` and
``retry_after`` feed the caller's policy (a Temporal activity retry, or the in-process loop).

Usage is as Anthropic reports it: ``input`` counts uncached input tokens, ``cache_read`` and
``cache_write`` the cached ones, ``output`` every output token, ``reasoning`` the thinking part.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

try:
    import anthropic
    import httpx2
    from anthropic import AsyncAnthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "durable_agent.ai.providers.anthropic needs the anthropic SDK: "
        "pip install 'durable-agent[anthropic]'"
    ) from exc

from ..messages import (
    ContentBlock,
    FileContent,
    ImageContent,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from ..model import ModelError, ModelEvent, ModelRequest, ToolSpec
from ._common import (
    Draft,
    final_arguments,
    guarded,
    model_error,
    partial_arguments,
    retry_after_seconds,
    status_retryable,
)

if TYPE_CHECKING:
    from anthropic import AsyncStream
    from anthropic.types import MessageParam, RawMessageStreamEvent, ToolUnionParam

__all__ = [
    "API",
    "DEFAULT_MAX_TOKENS",
    "REDACTED_THINKING_PREFIX",
    "AnthropicModel",
    "to_anthropic_messages",
    "to_anthropic_tools",
]

API = "anthropic-messages"

DEFAULT_MAX_TOKENS = 8192
"""The Messages API requires ``max_tokens``; this is sent unless an option sets it."""

REDACTED_THINKING_PREFIX = "redacted_thinking:"
"""Marks a ThinkingContent signature that holds a ``redacted_thinking`` block's opaque data."""

_RESERVED = frozenset({"model", "messages", "stream", "tools", "system"})
"""Request keys the adapter owns; an option naming one is refused rather than silently lost."""

_STOP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    # A server-tool loop paused; the turn is complete as far as the client is concerned.
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
    "refusal": "error",
}

_TRANSIENT_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
"""Error types (sent in a 200 stream, or with a status) worth retrying."""


class AnthropicModel:
    """An Anthropic Messages model, streaming text, thinking (with signatures) and tool calls.

    ``model`` is the model ID; ``provider`` labels the messages produced. ``api_key`` and
    ``base_url`` go to the SDK client and nowhere else: they never appear in messages, errors or
    this object's ``repr``. ``client`` replaces the SDK client altogether (its retry setting is then
    the caller's). ``options`` are request parameters sent on every call (``max_tokens``,
    ``thinking``, ``temperature``, ``cache_control``...), overridden per call by
    ``ModelRequest.options``.
    """

    api = API

    def __init__(
        self,
        model: str,
        *,
        provider: str = "anthropic",
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int = 0,
        client: AsyncAnthropic | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.provider = provider
        self.options = dict(options or {})
        if client is None:
            client = AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
                timeout=anthropic.not_given if timeout is None else timeout,
            )
        self._client = client
        self._secrets = (api_key, client.api_key, client.auth_token)

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, provider={self.provider!r})"

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (what the tests pin down)."""
        options = {**self.options, **request.options}
        reserved = _RESERVED & options.keys()
        if reserved:
            raise ModelError(
                f"{self.provider}: options may not set {sorted(reserved)}", retryable=False
            )
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": options.pop("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": to_anthropic_messages(request.messages),
            "stream": True,
        }
        if request.system_prompt:
            body["system"] = request.system_prompt
        if request.tools:
            body["tools"] = to_anthropic_tools(request.tools)
        body.update(options)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body = self.request_body(request)
        stream = await self._open(body)
        # However the consumer stops (done, error, cancel, aclose), the HTTP response is closed.
        try:
            async with aclosing(self._events(stream)) as events:
                async for event in events:
                    yield event
        finally:
            await stream.close()

    async def _open(self, body: dict[str, Any]) -> AsyncStream[RawMessageStreamEvent]:
        params = dict(body)
        model = cast(str, params.pop("model"))
        max_tokens = cast(int, params.pop("max_tokens"))
        messages = cast("list[MessageParam]", params.pop("messages"))
        tools = cast("list[ToolUnionParam] | None", params.pop("tools", None))
        system = cast("str | None", params.pop("system", None))
        params.pop("stream")
        try:
            return await self._client.messages.create(
                model=model,
                max_tokens=max_tokens,
                messages=messages,
                stream=True,
                system=anthropic.omit if system is None else system,
                tools=anthropic.omit if tools is None else tools,
                extra_body=params,
            )
        except _SDK_ERRORS as exc:
            error = self._error(exc)
        # Raised here, outside the except block, so the SDK error (which holds the request, headers
        # included) is neither the cause nor the context of what the caller sees.
        raise error

    def _raw_events(
        self, stream: AsyncStream[RawMessageStreamEvent]
    ) -> AsyncIterator[RawMessageStreamEvent]:
        return guarded(stream, _SDK_ERRORS, self._error)

    async def _events(
        self, stream: AsyncStream[RawMessageStreamEvent]
    ) -> AsyncGenerator[ModelEvent, None]:
        draft = Draft(api=API, provider=self.provider, model=self.model)
        blocks: dict[int, int] = {}  # the API's block index -> ours, for the blocks we keep
        tool_json: dict[int, str] = {}  # our block index -> tool input JSON so far
        usage: dict[str, int] = {}
        stop: str | None = None
        refusal: str | None = None
        stopped = False
        yield ModelEvent(type="start", partial=draft.snapshot())
        async for event in self._raw_events(stream):
            if event.type == "message_start":
                _merge_usage(usage, event.message.usage)
            elif event.type == "content_block_start":
                block = _start_block(event.content_block)
                if block is not None:
                    blocks[event.index] = len(draft.blocks)
                    draft.blocks.append(block)
                    if isinstance(block, ToolCall):
                        tool_json[blocks[event.index]] = ""
            elif event.type == "content_block_delta":
                index = blocks.get(event.index)
                if index is None:
                    continue
                current = draft.blocks[index]
                delta = event.delta
                if delta.type == "text_delta" and isinstance(current, TextContent):
                    draft.blocks[index] = TextContent(text=current.text + delta.text)
                    yield ModelEvent(
                        type="text_delta", partial=draft.snapshot(), delta=delta.text, index=index
                    )
                elif delta.type == "thinking_delta" and isinstance(current, ThinkingContent):
                    draft.blocks[index] = ThinkingContent(
                        thinking=current.thinking + delta.thinking, signature=current.signature
                    )
                    yield ModelEvent(
                        type="thinking_delta",
                        partial=draft.snapshot(),
                        delta=delta.thinking,
                        index=index,
                    )
                elif delta.type == "signature_delta" and isinstance(current, ThinkingContent):
                    signature = (current.signature or "") + delta.signature
                    draft.blocks[index] = ThinkingContent(
                        thinking=current.thinking, signature=signature
                    )
                elif delta.type == "input_json_delta" and isinstance(current, ToolCall):
                    tool_json[index] += delta.partial_json
                    draft.blocks[index] = ToolCall(
                        id=current.id,
                        name=current.name,
                        arguments=partial_arguments(tool_json[index]),
                    )
                    yield ModelEvent(
                        type="tool_call_delta",
                        partial=draft.snapshot(),
                        delta=delta.partial_json,
                        index=index,
                    )
            elif event.type == "message_delta":
                _merge_usage(usage, event.usage)
                stop = event.delta.stop_reason or stop
                details = event.delta.stop_details
                if details is not None:
                    refusal = details.explanation or details.category or refusal
            elif event.type == "message_stop":
                stopped = True
                break
        if not stopped:
            raise model_error(self.provider, "stream ended before message_stop", retryable=True)
        # Arguments are parsed once the stop reason is known: input cut by max_tokens is kept as
        # far as it parses, anything else that is not a JSON object is a malformed response.
        for index, raw in tool_json.items():
            self._finish_call(draft, index, raw, stop)
        stop_reason = _STOP.get(stop or "", "error")
        error = None
        if stop_reason == "error":
            error = f"{self.provider}: stop_reason {stop}" + (f": {refusal}" if refusal else "")
        yield ModelEvent(
            type="done",
            partial=draft.final(usage=_usage(usage), stop_reason=stop_reason, error=error),
        )

    def _finish_call(self, draft: Draft, index: int, raw: str, stop: str | None) -> None:
        call = draft.blocks[index]
        assert isinstance(call, ToolCall)
        if not raw:  # no input_json_delta: the input came whole in content_block_start
            return
        arguments = final_arguments(raw)
        if arguments is None:
            if stop != "max_tokens":
                raise model_error(
                    self.provider,
                    f"tool call {call.name!r} has input that is not a JSON object",
                    retryable=True,
                )
            arguments = partial_arguments(raw)
        draft.blocks[index] = ToolCall(id=call.id, name=call.name, arguments=arguments)

    def _error(self, exc: Exception) -> ModelError:
        """Map an SDK, transport or stream-decoding failure to a credential-free ModelError."""
        name, key = self.provider, self._secrets
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            kind = exc.type or ""
            headers = exc.response.headers
            should = headers.get("x-should-retry")
            if status == 200:  # an error event inside a stream
                retryable = kind in _TRANSIENT_ERROR_TYPES
                summary = "error in stream" + (f" {kind}" if kind else "")
            else:
                retryable = status_retryable(status)
                summary = f"HTTP {status}" + (f" {kind}" if kind else "")
            if should in ("true", "false"):
                retryable = should == "true"
            return model_error(
                name,
                summary,
                detail=exc.api_message,
                retryable=retryable,
                retry_after=retry_after_seconds(headers) if status != 200 else None,
                secrets=key,
            )
        if isinstance(exc, anthropic.APITimeoutError):
            return model_error(name, "request timed out", retryable=True)
        if isinstance(exc, anthropic.APIConnectionError):
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
            return model_error(name, f"connection failed ({cause})", retryable=True)
        if isinstance(exc, anthropic.APIResponseValidationError):
            return model_error(name, "response did not match the API schema", retryable=False)
        if isinstance(exc, httpx2.TimeoutException):
            return model_error(name, "request timed out", retryable=True)
        if isinstance(exc, httpx2.TransportError):
            return model_error(name, f"connection failed ({type(exc).__name__})", retryable=True)
        if isinstance(exc, json.JSONDecodeError):
            return model_error(name, "malformed stream: an event is not valid JSON", retryable=True)
        return model_error(name, f"unexpected {type(exc).__name__}", retryable=False)


_SDK_ERRORS: tuple[type[Exception], ...] = (
    anthropic.APIError,
    httpx2.TransportError,
    json.JSONDecodeError,
)


def _start_block(block: Any) -> ContentBlock | None:
    """Our block for a ``content_block_start``; ``None`` for kinds this adapter does not keep
    (server-tool blocks and their results)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return TextContent(text=block.text)
    if kind == "thinking":
        return ThinkingContent(thinking=block.thinking, signature=block.signature or None)
    if kind == "redacted_thinking":
        return ThinkingContent(thinking="", signature=REDACTED_THINKING_PREFIX + block.data)
    if kind == "tool_use":
        return ToolCall(id=block.id, name=block.name, arguments=dict(block.input or {}))
    return None


def _merge_usage(totals: dict[str, int], usage: Any) -> None:
    """Fold a usage report in; ``message_delta`` counts are cumulative, so later values win."""
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int):
            totals[key] = value
    value = getattr(usage, "cache_creation_input_tokens", None)
    if isinstance(value, int):
        totals["cache_creation_input_tokens"] = value
    details = getattr(usage, "output_tokens_details", None)
    thinking = getattr(details, "thinking_tokens", None)
    if isinstance(thinking, int):
        totals["thinking_tokens"] = thinking


def _usage(totals: Mapping[str, int]) -> Usage:
    return Usage(
        input=totals.get("input_tokens", 0),
        output=totals.get("output_tokens", 0),
        cache_read=totals.get("cache_read_input_tokens", 0),
        cache_write=totals.get("cache_creation_input_tokens", 0),
        reasoning=totals.get("thinking_tokens", 0),
    )


# -- conversion ---------------------------------------------------------------------------------


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Messages API client tools."""
    out: list[dict[str, Any]] = []
    for spec in tools:
        tool: dict[str, Any] = {"name": spec.name}
        if spec.description:
            tool["description"] = spec.description
        tool["input_schema"] = spec.parameters
        out.append(tool)
    return out


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation as Messages API messages.

    Consecutive tool results become the ``tool_result`` blocks of one user message, as the API
    requires. Thinking is sent back only from messages this API produced (a signature from another
    provider would be rejected) and only with its signature. Server-side tool calls, and empty text
    blocks (which the API refuses), are left out, as is an assistant message left with nothing.
    """
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the open tool-result user message's content
    for message in messages:
        if message.role == "tool_result":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(_tool_result(message))
            continue
        results = None
        if message.role == "user":
            content = [b for b in map(_user_block, message.content) if b is not None]
            out.append({"role": "user", "content": content})
        else:
            content = _assistant_blocks(message)
            if content:
                out.append({"role": "assistant", "content": content})
    return out


def _user_block(block: ContentBlock) -> dict[str, Any] | None:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ImageContent):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
        }
    if isinstance(block, FileContent):
        return _document(block)
    return None


def _document(block: FileContent) -> dict[str, Any]:
    source: dict[str, Any]
    if block.file_id:
        source = {"type": "file", "file_id": block.file_id}
    elif block.url:
        source = {"type": "url", "url": block.url}
    elif block.data and (block.mime_type or "").startswith("text/"):
        try:
            text = base64.b64decode(block.data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ModelError(
                "anthropic-messages: a text file's data is not base64 UTF-8", retryable=False
            ) from None
        source = {"type": "text", "media_type": "text/plain", "data": text}
    elif block.data:
        source = {
            "type": "base64",
            "media_type": block.mime_type or "application/pdf",
            "data": block.data,
        }
    else:
        raise ModelError(
            "anthropic-messages: a file block has no data, url or file_id", retryable=False
        )
    document: dict[str, Any] = {"type": "document", "source": source}
    if block.filename:
        document["title"] = block.filename
    return document


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    native = message.api == API
    out: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if not native or not block.signature:
                continue
            if block.signature.startswith(REDACTED_THINKING_PREFIX):
                data = block.signature.removeprefix(REDACTED_THINKING_PREFIX)
                out.append({"type": "redacted_thinking", "data": data})
            else:
                out.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
        elif isinstance(block, TextContent):
            if block.text:
                out.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall) and not block.server:
            out.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
    return out


def _tool_result(message: Message) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent) and block.text:
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            content.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
                }
            )
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    if content:
        result["content"] = content
    if message.is_error:
        result["is_error"] = True
    return result
