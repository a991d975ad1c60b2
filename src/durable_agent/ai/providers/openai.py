"""OpenAI Chat Completions as a :class:`~durable_agent.ai.model.LanguageModel`.

Built on the official ``openai`` SDK (the ``openai`` extra). Chat Completions is the API every
OpenAI-compatible server speaks (vLLM, Ollama, llama.cpp, LM Studio, OpenRouter), so ``base_url``
points this adapter at any of them.

Retries are the caller's: the SDK client is built with ``max_retries=0``, so a failed call
surfaces at once as a :class:`~durable_agent.ai.model.ModelError` whose ``retryable`` and
``retry_after`` feed the caller's policy (a Temporal activity retry, or the in-process loop). SDK
retries inside one activity attempt would hide failures from that policy and stack their backoff
under its timeouts.

Usage is normalised the way Anthropic reports it: ``input`` counts uncached prompt tokens only,
``cache_read`` and ``cache_write`` the cached ones, ``output`` every completion token;
``reasoning``, ``input_audio`` and ``output_audio`` are the parts of those totals broken out.
A stream whose chunks carry ``usage: null`` (the server took ``include_usage``, and sends the
counts in a last chunk) but that ends without that chunk is truncated: a retryable error, as a
stream cut before ``finish_reason`` is, not a reply that cost nothing. A server that ignores the
option sends no such field; its replies have zero usage, as with ``stream_usage=False``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

try:
    import openai
    from openai import AsyncOpenAI
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "durable_agent.ai.providers.openai needs the openai SDK: pip install '.[openai]'"
    ) from exc

from ..messages import StopReason, TextContent, ThinkingContent, ToolCall, Usage
from ..model import ModelError, ModelEvent, ModelRequest
from ._common import Draft, call_arguments, model_error, partial_arguments, status_retryable
from .adapter import SDK_TRANSPORT_ERRORS, StreamingAdapter
from .openai_messages import to_openai_messages, to_openai_tools

if TYPE_CHECKING:
    import httpx2
    from openai import AsyncStream
    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletionChunk,
        ChatCompletionMessageParam,
        ChatCompletionToolUnionParam,
    )
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

__all__ = [
    "API",
    "OpenAIChatModel",
    "to_openai_messages",
    "to_openai_tools",
]

API = "openai-chat"

_FINISH: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "error",
}

_TRANSIENT_STREAM_ERRORS = frozenset(
    {"server_error", "internal_error", "rate_limit_exceeded", "rate_limit_error", "overloaded"}
)
"""In-stream error types (the status was already 200) worth retrying; others are the request's."""


class OpenAIChatModel(StreamingAdapter["AsyncStream[ChatCompletionChunk]"]):
    """A Chat Completions model, streaming text, reasoning and tool calls.

    ``model`` is the provider's model ID; ``provider`` only labels the messages produced
    (``openai``, ``ollama``, ``vllm``...). ``api_key`` and ``base_url`` go to the SDK client and
    nowhere else: they never appear in messages, errors or this object's ``repr``. ``client``
    replaces the SDK client altogether (its retry setting is then the caller's). ``options`` are
    request parameters sent on every call (``temperature``, ``max_completion_tokens``...),
    overridden per call by ``ModelRequest.options``. ``system_role`` is ``"developer"`` for models
    that want it. ``stream_usage`` asks for the final usage chunk; turn it off for a server that
    rejects ``stream_options``.
    """

    api = API
    reserved = frozenset({"model", "messages", "stream", "tools"})
    sdk_errors = (openai.APIError, *SDK_TRANSPORT_ERRORS)

    def __init__(
        self,
        model: str,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int = 0,
        client: AsyncOpenAI | None = None,
        options: Mapping[str, Any] | None = None,
        system_role: Literal["system", "developer"] = "system",
        stream_usage: bool = True,
    ) -> None:
        if client is None:
            client = AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                max_retries=max_retries,
                timeout=openai.not_given if timeout is None else timeout,
            )
        super().__init__(
            model, provider=provider, options=options, secrets=(api_key, client.api_key)
        )
        self.system_role = system_role
        self.stream_usage = stream_usage
        self.client = client

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self.client.close()

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (what the tests pin down)."""
        options = self.merged_options(request)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(
                request.system_prompt, request.messages, system_role=self.system_role
            ),
            "stream": True,
        }
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        body.update(options)
        if self.stream_usage:  # added to an option's stream_options, which would drop it
            given = options.get("stream_options")
            body["stream_options"] = {"include_usage": True, **(given or {})}
        return body

    async def create(self, body: dict[str, Any]) -> AsyncStream[ChatCompletionChunk]:
        params = dict(body)
        messages = cast("list[ChatCompletionMessageParam]", params.pop("messages"))
        tools = cast("list[ChatCompletionToolUnionParam] | None", params.pop("tools", None))
        model = cast(str, params.pop("model"))
        params.pop("stream")
        return await self.client.chat.completions.create(
            model=model,
            messages=messages,
            stream=True,
            tools=openai.omit if tools is None else tools,
            extra_body=params,
        )

    async def events(
        self, stream: AsyncStream[ChatCompletionChunk]
    ) -> AsyncGenerator[ModelEvent, None]:
        draft = Draft(api=API, provider=self.provider, model=self.model)
        calls: list[_PendingCall] = []
        by_index: dict[int, _PendingCall] = {}  # the stream's tool-call index -> its latest call
        finish: str | None = None
        refusal = ""
        usage: Usage | None = None
        promised = False  # chunks carry ``usage: null`` when the server will send it last
        yield ModelEvent(type="start", partial=draft.snapshot())
        async for chunk in self.items(stream):
            if chunk.usage is not None:
                usage = _usage(chunk.usage)
            promised = promised or "usage" in chunk.model_fields_set
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            if choice.finish_reason is not None:
                finish = choice.finish_reason
            delta = choice.delta
            if delta is None:  # Azure's asynchronous content filter: annotations only
                continue
            reasoning = _reasoning(delta)
            if reasoning:
                index = _append_text(draft, ThinkingContent, reasoning)
                yield ModelEvent(
                    type="thinking_delta", partial=draft.snapshot(), delta=reasoning, index=index
                )
            refusal += delta.refusal or ""
            text = (delta.content or "") + (delta.refusal or "")
            if text:
                index = _append_text(draft, TextContent, text)
                yield ModelEvent(
                    type="text_delta", partial=draft.snapshot(), delta=text, index=index
                )
            for tool_delta in delta.tool_calls or []:
                yield _tool_call_delta(draft, by_index, calls, tool_delta)
        if finish is None:
            raise self.ended_early(
                stream, "stream ended before the model finished (no finish_reason)"
            )
        if usage is None and promised and self.stream_usage:
            raise self.ended_early(stream, "stream ended before the usage chunk it promised")
        stop = _FINISH.get(finish, "error")
        self._close_calls(draft, calls, truncated=stop == "length")
        if stop == "stop" and calls:
            stop = "tool_use"  # some compatible servers report "stop" after calling tools
        error = None
        if stop == "error":
            error = f"{self.provider}: finish_reason {finish}"
        elif refusal and stop == "stop":
            # A refusal finishes with "stop" too: marked, so it ends the run as a refusal (as
            # Anthropic's stop_reason "refusal" does) instead of passing for an answer.
            stop, error = "error", f"{self.provider}: refusal: {refusal}"
        yield ModelEvent(
            type="done", partial=draft.final(usage=usage or Usage(), stop_reason=stop, error=error)
        )

    def _close_calls(self, draft: Draft, calls: list[_PendingCall], *, truncated: bool) -> None:
        """Give each streamed call its final arguments (``_common.call_arguments``) and an ID
        if the server sent none; a call the reply was cut inside is left out."""
        cut: list[int] = []
        for pending in calls:
            malformed = f"tool call {pending.name!r} has arguments that are not a JSON object"
            arguments = call_arguments(
                self.provider, pending.arguments, truncated=truncated, malformed=malformed
            )
            if arguments is None:
                cut.append(pending.block)
                continue
            draft.blocks[pending.block] = ToolCall(
                id=pending.id or f"call_{secrets.token_hex(8)}",
                name=pending.name,
                arguments=arguments,
            )
        for block in reversed(cut):
            del draft.blocks[block]

    def to_error(self, exc: Exception) -> ModelError:
        """Map an SDK, transport or stream-decoding failure to a credential-free ModelError."""
        name, key = self.provider, self.secrets
        if isinstance(exc, openai.APIStatusError):
            detail = _body_message(exc.body)
            if exc.code == "insufficient_quota":  # a 429 that lasts until someone pays: final
                return model_error(
                    name,
                    f"HTTP {exc.status_code} {exc.code}",
                    detail=detail,
                    retryable=False,
                    secrets=key,
                )
            return self.status_error(exc.status_code, exc.type, exc.response.headers, detail)
        if isinstance(exc, openai.APIError) and not isinstance(
            exc, openai.APIConnectionError | openai.APIResponseValidationError
        ):  # an error object sent inside a 200 stream
            return self._in_band(exc, "error in stream")
        return self.transport_error(
            exc,
            timeout=openai.APITimeoutError,
            connection=openai.APIConnectionError,
            validation=openai.APIResponseValidationError,
        )

    def body_error(self, response: httpx2.Response, payload: dict[str, Any]) -> ModelError:
        # built as the SDK builds an error object it finds in a stream
        return self._in_band(
            openai.APIError("", response.request, body=payload["error"]), "error in a 200 response"
        )

    def _in_band(self, exc: openai.APIError, where: str) -> ModelError:
        """The error of an error object the server sent after its 200 (``where`` says how)."""
        kind = exc.type or exc.code or ""
        # compatible servers (vLLM, llama.cpp) give the HTTP status it stands for as ``code``
        # (the SDK makes it text) and name the type their own way ("InternalServerError")
        code = exc.code or ""
        if code.isdigit() and 400 <= int(code) < 600:
            retryable = status_retryable(int(code))
        else:
            retryable = kind in _TRANSIENT_STREAM_ERRORS or not kind
        return model_error(
            self.provider,
            where + (f" {kind}" if kind else ""),
            detail=_body_message(exc.body) or exc.message,
            retryable=retryable,
            secrets=self.secrets,
        )


class _PendingCall:
    """A tool call being streamed: its ID, name and argument text so far, and its block index."""

    def __init__(self, *, id: str, block: int) -> None:
        self.id = id
        self.name = ""
        self.arguments = ""
        self.block = block


def _append_text(draft: Draft, kind: type[TextContent] | type[ThinkingContent], piece: str) -> int:
    """Extend the last block if it is of ``kind``, else open a new one; return its index."""
    last = draft.blocks[-1] if draft.blocks else None
    if kind is TextContent:
        if isinstance(last, TextContent):
            draft.blocks[-1] = TextContent(text=last.text + piece)
        else:
            draft.blocks.append(TextContent(text=piece))
    elif isinstance(last, ThinkingContent):
        draft.blocks[-1] = ThinkingContent(thinking=last.thinking + piece)
    else:
        draft.blocks.append(ThinkingContent(thinking=piece))
    return len(draft.blocks) - 1


def _reasoning(delta: Any) -> str:
    """Reasoning text from compatible servers: ``reasoning_content`` (vLLM, DeepSeek, llama.cpp)
    or ``reasoning`` (Ollama, OpenRouter). OpenAI itself does not stream reasoning here."""
    extra: dict[str, Any] = getattr(delta, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage(raw: CompletionUsage) -> Usage:
    prompt = raw.prompt_tokens_details
    completion = raw.completion_tokens_details
    cache_read = (prompt.cached_tokens if prompt else None) or 0
    cache_write = (getattr(prompt, "cache_write_tokens", None) if prompt else None) or 0
    # Counts may be null from compatible servers (Databricks): unknown reads as zero.
    return Usage(
        input=max(0, (raw.prompt_tokens or 0) - cache_read - cache_write),
        output=raw.completion_tokens or 0,
        cache_read=cache_read,
        cache_write=cache_write,
        reasoning=(completion.reasoning_tokens if completion else None) or 0,
        input_audio=(prompt.audio_tokens if prompt else None) or 0,
        output_audio=(completion.audio_tokens if completion else None) or 0,
    )


def _body_message(body: object) -> str | None:
    """The human-readable message of an error body (``{"message": ...}`` or ``{"error": ...}``)."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            return message if isinstance(message, str) else None
        if isinstance(inner, str):
            return inner
    if isinstance(body, str):
        return body
    return None


def _tool_call_delta(
    draft: Draft,
    by_index: dict[int, _PendingCall],
    calls: list[_PendingCall],
    tool_delta: ChoiceDeltaToolCall,
) -> ModelEvent:
    """Fold one streamed tool-call fragment into the draft; the event that shows it."""
    pending = by_index.get(tool_delta.index)
    if pending is None or (tool_delta.id and pending.id and tool_delta.id != pending.id):
        # A new call, or (from servers that send every call at index 0) a new ID.
        pending = _PendingCall(id=tool_delta.id or "", block=len(draft.blocks))
        by_index[tool_delta.index] = pending
        calls.append(pending)
        draft.blocks.append(ToolCall(id=pending.id, name=""))
    function = tool_delta.function
    fragment = (function.arguments if function else None) or ""
    pending.id = pending.id or tool_delta.id or ""
    pending.name = pending.name or (function.name if function else None) or ""
    pending.arguments += fragment
    draft.blocks[pending.block] = ToolCall(
        id=pending.id, name=pending.name, arguments=partial_arguments(pending.arguments)
    )
    return ModelEvent(
        type="tool_call_delta", partial=draft.snapshot(), delta=fragment, index=pending.block
    )
