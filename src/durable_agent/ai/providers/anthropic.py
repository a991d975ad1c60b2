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
Its final counts come in ``message_delta``: a stream that ends without one, ``message_stop``
or not, is truncated (a retryable error), as OpenAI's without its usage chunk is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, cast

try:
    import anthropic
    from anthropic import AsyncAnthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "durable_agent.ai.providers.anthropic needs the anthropic SDK: pip install '.[anthropic]'"
    ) from exc

from ..messages import ContentBlock, StopReason, TextContent, ThinkingContent, ToolCall, Usage
from ..model import ModelError, ModelEvent, ModelRequest
from ._common import Draft, call_arguments, model_error, partial_arguments, should_retry
from .adapter import SDK_TRANSPORT_ERRORS, StreamingAdapter
from .anthropic_messages import (
    API,
    REDACTED_THINKING_PREFIX,
    to_anthropic_messages,
    to_anthropic_tools,
)

if TYPE_CHECKING:
    import httpx2
    from anthropic import AsyncStream
    from anthropic.types import (
        MessageParam,
        RawContentBlockDelta,
        RawMessageStreamEvent,
        ToolUnionParam,
    )

__all__ = [
    "API",
    "DEFAULT_MAX_TOKENS",
    "REDACTED_THINKING_PREFIX",
    "AnthropicModel",
    "to_anthropic_messages",
    "to_anthropic_tools",
]


DEFAULT_MAX_TOKENS = 8192
"""The Messages API requires ``max_tokens``; this is sent unless an option sets it."""

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


class AnthropicModel(StreamingAdapter["AsyncStream[RawMessageStreamEvent]"]):
    """An Anthropic Messages model, streaming text, thinking (with signatures) and tool calls.

    ``model`` is the model ID; ``provider`` labels the messages produced. ``api_key`` and
    ``base_url`` go to the SDK client and nowhere else: they never appear in messages, errors or
    this object's ``repr``. ``client`` replaces the SDK client altogether (its retry setting is then
    the caller's). ``options`` are request parameters sent on every call (``max_tokens``,
    ``thinking``, ``temperature``, ``cache_control``...), overridden per call by
    ``ModelRequest.options``.
    """

    api = API
    reserved = frozenset({"model", "messages", "stream", "tools", "system"})
    sdk_errors = (anthropic.APIError, *SDK_TRANSPORT_ERRORS)

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
        if client is None:
            client = AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
                timeout=anthropic.not_given if timeout is None else timeout,
            )
        secrets = (api_key, client.api_key, client.auth_token)
        super().__init__(model, provider=provider, options=options, secrets=secrets)
        self.client = client

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self.client.close()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (what the tests pin down)."""
        options = self.merged_options(request)
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

    async def create(self, body: dict[str, Any]) -> AsyncStream[RawMessageStreamEvent]:
        params = dict(body)
        model = cast(str, params.pop("model"))
        max_tokens = cast(int, params.pop("max_tokens"))
        messages = cast("list[MessageParam]", params.pop("messages"))
        tools = cast("list[ToolUnionParam] | None", params.pop("tools", None))
        system = cast("str | None", params.pop("system", None))
        params.pop("stream")
        return await self.client.messages.create(
            model=model,
            max_tokens=max_tokens,
            messages=messages,
            stream=True,
            system=anthropic.omit if system is None else system,
            tools=anthropic.omit if tools is None else tools,
            extra_body=params,
        )

    async def events(
        self, stream: AsyncStream[RawMessageStreamEvent]
    ) -> AsyncGenerator[ModelEvent, None]:
        draft = Draft(api=API, provider=self.provider, model=self.model)
        blocks: dict[int, int] = {}  # the API's block index -> ours, for the blocks we keep
        tool_json: dict[int, str] = {}  # our block index -> tool input JSON so far
        usage: dict[str, int] = {}
        stop: str | None = None
        refusal: str | None = None
        delta_came = stopped = False
        yield ModelEvent(type="start", partial=draft.snapshot())
        async for event in self.items(stream):
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
                if index is not None:
                    shown = _apply_delta(draft, index, event.delta, tool_json)
                    if shown is not None:
                        yield shown
            elif event.type == "message_delta":
                delta_came = True
                _merge_usage(usage, event.usage)
                stop = event.delta.stop_reason or stop
                details = event.delta.stop_details
                if details is not None:
                    refusal = details.explanation or details.category or refusal
            elif event.type == "message_stop":
                stopped = True
                break
        if not stopped:
            raise self.ended_early(stream, "stream ended before message_stop")
        if not delta_came:  # the reply's stop reason and final usage never came: cut as above
            what = "stream ended without message_delta (no stop_reason nor usage)"
            raise self.ended_early(stream, what)
        # Arguments are parsed once the stop reason is known: input cut by max_tokens is kept as
        # far as it parses, anything else that is not a JSON object is a malformed response.
        cut = [i for i, raw in tool_json.items() if not self._finish_call(draft, i, raw, stop)]
        for index in reversed(cut):
            del draft.blocks[index]
        stop_reason = _STOP.get(stop or "", "error")
        error = None
        if stop_reason == "error":
            error = f"{self.provider}: stop_reason {stop}" + (f": {refusal}" if refusal else "")
        yield ModelEvent(
            type="done",
            partial=draft.final(usage=_usage(usage), stop_reason=stop_reason, error=error),
        )

    def _finish_call(self, draft: Draft, index: int, raw: str, stop: str | None) -> bool:
        """Give call ``index`` its final arguments; false for a call the reply was cut inside
        (``_common.call_arguments``), which is left out."""
        call = draft.blocks[index]
        assert isinstance(call, ToolCall)
        if not raw and call.arguments:  # no input_json_delta: it came whole in the block start
            return True
        malformed = f"tool call {call.name!r} has input that is not a JSON object"
        arguments = call_arguments(
            self.provider, raw, truncated=stop == "max_tokens", malformed=malformed
        )
        if arguments is None:
            return False
        draft.blocks[index] = ToolCall(id=call.id, name=call.name, arguments=arguments)
        return True

    def to_error(self, exc: Exception) -> ModelError:
        """Map an SDK, transport or stream-decoding failure to a credential-free ModelError."""
        if isinstance(exc, anthropic.APIStatusError):
            if exc.status_code != 200:
                # a body that is not the API's JSON (a proxy's text, say) is the detail itself
                body = exc.body if isinstance(exc.body, str) else None
                detail = exc.api_message or body
                return self.status_error(exc.status_code, exc.type, exc.response.headers, detail)
            return self._in_band(exc, "error in stream")  # an error event inside a stream
        return self.transport_error(
            exc,
            timeout=anthropic.APITimeoutError,
            connection=anthropic.APIConnectionError,
            validation=anthropic.APIResponseValidationError,
        )

    def body_error(self, response: httpx2.Response, payload: dict[str, Any]) -> ModelError:
        # built as the SDK builds the error of an error event in a stream
        exc = anthropic.APIStatusError("", response=response, body=payload)
        return self._in_band(exc, "error in a 200 response")

    def _in_band(self, exc: anthropic.APIStatusError, where: str) -> ModelError:
        """The error of an error object the server sent after its 200 (``where`` says how)."""
        kind = exc.type or ""
        return model_error(
            self.provider,
            where + (f" {kind}" if kind else ""),
            detail=exc.api_message,
            # untyped: the server's (the request was taken), retried as OpenAI's adapter does
            retryable=should_retry(
                exc.response.headers, default=kind in _TRANSIENT_ERROR_TYPES or not kind
            ),
            secrets=self.secrets,
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


def _apply_delta(
    draft: Draft, index: int, delta: RawContentBlockDelta, tool_json: dict[int, str]
) -> ModelEvent | None:
    """Fold one content-block delta into block ``index`` of the draft; the event that shows it
    (none for a signature, which nobody watches, or a delta that does not fit its block)."""
    current = draft.blocks[index]
    if delta.type == "text_delta" and isinstance(current, TextContent):
        draft.blocks[index] = TextContent(text=current.text + delta.text)
        return ModelEvent(
            type="text_delta", partial=draft.snapshot(), delta=delta.text, index=index
        )
    if delta.type == "thinking_delta" and isinstance(current, ThinkingContent):
        draft.blocks[index] = ThinkingContent(
            thinking=current.thinking + delta.thinking, signature=current.signature
        )
        return ModelEvent(
            type="thinking_delta", partial=draft.snapshot(), delta=delta.thinking, index=index
        )
    if delta.type == "signature_delta" and isinstance(current, ThinkingContent):
        signature = (current.signature or "") + delta.signature
        draft.blocks[index] = ThinkingContent(thinking=current.thinking, signature=signature)
    elif delta.type == "input_json_delta" and isinstance(current, ToolCall):
        tool_json[index] += delta.partial_json
        draft.blocks[index] = ToolCall(
            id=current.id, name=current.name, arguments=partial_arguments(tool_json[index])
        )
        return ModelEvent(
            type="tool_call_delta", partial=draft.snapshot(), delta=delta.partial_json, index=index
        )
    return None
