"""The client skeleton every SDK-backed provider adapter shares.

An adapter turns one :class:`~durable_agent.ai.model.ModelRequest` into a request body, opens the
SDK's stream, and maps the stream's chunks to :class:`~durable_agent.ai.model.ModelEvent`\\ s. The
parts that are not about one provider's wire format live here, written once: refusing options
that would overwrite the body the adapter owns, closing the HTTP response however the consumer
stops, raising SDK failures as credential-free :class:`~durable_agent.ai.model.ModelError`\\ s
*outside* the ``except`` block (the SDK error holds the request, headers included, so it must be
neither the cause nor the context of what the caller sees), and classifying the transport
failures every SDK shares, and reading a 200 whose JSON body is an error object instead of a
stream. A provider module supplies the body, the SDK call, the event mapping and its error
mapping.

Importing this module needs ``httpx2``, which both SDK extras bring; the adapters import it, the
package's ``__init__`` does not.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import httpx2

from ..model import ModelError, ModelEvent, ModelRequest
from ._common import guarded, model_error, retry_after_seconds, should_retry, status_retryable

__all__ = ["SDK_TRANSPORT_ERRORS", "SdkStream", "StreamingAdapter"]


_OFF_SCHEMA: tuple[type[Exception], ...] = (AttributeError, TypeError, ValueError, LookupError)
"""What mapping an event of another shape raises (a pydantic ValidationError is a ValueError)."""


class SdkStream(Protocol):
    """What the adapters need of an SDK's stream object: iterate it, close it."""

    response: httpx2.Response

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def close(self) -> None: ...


StreamT = TypeVar("StreamT", bound=SdkStream)


class StreamingAdapter(ABC, Generic[StreamT]):
    """Base of the SDK-backed adapters; see the module docstring for what it owns.

    ``secrets`` are the credential values the SDK client holds; every error message built from a
    provider's answer is redacted with them (see :func:`~._common.redact`).
    """

    api: ClassVar[str]
    reserved: ClassVar[frozenset[str]]
    """Request keys the adapter owns; an option naming one is refused rather than silently lost."""
    sdk_errors: ClassVar[tuple[type[Exception], ...]]
    """What the SDK raises, mapped by :meth:`to_error`; anything else is a bug and propagates."""

    def __init__(
        self,
        model: str,
        *,
        provider: str,
        options: Mapping[str, Any] | None,
        secrets: tuple[str | None, ...],
    ) -> None:
        self.model = model
        self.provider = provider
        self.options = dict(options or {})
        self.secrets = secrets

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, provider={self.provider!r})"

    @abstractmethod
    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this adapter sends for ``request`` (what the tests pin down)."""

    @abstractmethod
    async def create(self, body: dict[str, Any]) -> StreamT:
        """Open the SDK stream for ``body``; SDK failures propagate (see :meth:`open`)."""

    @abstractmethod
    def events(self, stream: StreamT) -> AsyncGenerator[ModelEvent, None]:
        """The model events of an open stream (iterate its items through :meth:`items`)."""

    @abstractmethod
    def to_error(self, exc: Exception) -> ModelError:
        """Map an SDK, transport or stream-decoding failure to a credential-free ModelError."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""

    def merged_options(self, request: ModelRequest) -> dict[str, Any]:
        """The adapter's options overridden by the request's; a reserved key is refused."""
        options = {**self.options, **request.options}
        reserved = self.reserved & options.keys()
        if reserved:
            raise ModelError(
                f"{self.provider}: options may not set {sorted(reserved)}", retryable=False
            )
        return options

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body = self.request_body(request)
        stream = await self.open(body)
        # However the consumer stops (done, error, cancel, aclose), the HTTP response is closed.
        try:
            async with (
                aclosing(self.events(stream)) as events,
                aclosing(guarded(events, _OFF_SCHEMA, self.off_schema)) as checked,
            ):
                async for event in checked:
                    yield event
        finally:
            await stream.close()

    def off_schema(self, exc: Exception) -> ModelError:
        """The error of an event that is JSON but not of the API's shape (``null``, a field of
        another type or missing: the SDKs build events without validating them), which the
        mapping trips over: final, like the SDK's own schema error, and typed."""
        what = f"response did not match the API schema ({type(exc).__name__})"
        return model_error(self.provider, what, retryable=False)

    async def open(self, body: dict[str, Any]) -> StreamT:
        """:meth:`create`, with an SDK failure raised as a ModelError outside the handler."""
        try:
            return await self.create(body)
        except self.sdk_errors as exc:
            error = self.to_error(exc)
        raise error

    @abstractmethod
    def body_error(self, response: httpx2.Response, payload: dict[str, Any]) -> ModelError:
        """The error a 200's JSON error object (``payload["error"]``) stands for, classified as
        the same object sent inside a stream."""

    async def items(self, stream: StreamT) -> AsyncIterator[Any]:
        """The stream's items, its failures raised as ModelErrors (see ``_common.guarded``)."""
        error = await self.error_answer(stream.response)
        if error is not None:
            raise error
        async for item in guarded(stream, self.sdk_errors, self.to_error):
            yield item

    async def error_answer(self, response: httpx2.Response) -> ModelError | None:
        """The error of a 200 whose JSON body is the API's error object, not a stream (what some
        gateways and proxies answer): the SDK would read it as a stream with no events, and the
        provider's message would be lost. Any other JSON body is left to the SDK, read from the
        buffer (a server that labels its event stream as JSON still works)."""
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            return None
        try:
            raw = await response.aread()
        except self.sdk_errors as exc:
            return self.to_error(exc)
        try:
            payload = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(payload, dict) or not payload.get("error"):
            return None
        return self.body_error(response, payload)

    def ended_early(self, stream: StreamT, what: str) -> ModelError:
        """The error of a stream that ended before the reply was complete: retryable (a cut
        connection), unless the 200 was no event stream at all (a ``base_url`` that is not the
        API's, a proxy ignoring ``stream``): no retry mends that, so it says what came."""
        content_type = stream.response.headers.get("content-type", "")
        if "text/event-stream" not in content_type.lower():
            kind = content_type.split(";")[0].strip() or "no content type"
            return model_error(
                self.provider,
                f"the server answered 200 with {kind}, not an event stream "
                "(is base_url the API's?)",
                retryable=False,
            )
        return model_error(self.provider, what, retryable=True)

    def status_error(
        self, status: int, kind: str | None, headers: Mapping[str, str], detail: str | None
    ) -> ModelError:
        """An HTTP error status (``kind``: the provider's error type), retryable as the provider's
        ``x-should-retry`` header says, else by status, with the provider's retry hint."""
        return model_error(
            self.provider,
            f"HTTP {status}" + (f" {kind}" if kind else ""),
            detail=detail,
            retryable=should_retry(headers, default=status_retryable(status)),
            retry_after=retry_after_seconds(headers),
            secrets=self.secrets,
        )

    def transport_error(
        self,
        exc: Exception,
        *,
        timeout: type[Exception],
        connection: type[Exception],
        validation: type[Exception],
    ) -> ModelError:
        """The failures every SDK shares: its timeout, connection and schema-validation errors
        (given as the SDK's own classes), the transport's, and undecodable stream events."""
        name = self.provider
        if isinstance(exc, timeout):
            return model_error(name, "request timed out", retryable=True)
        if isinstance(exc, connection):
            cause = type(exc.__cause__).__name__ if exc.__cause__ else "connection error"
            return model_error(name, f"connection failed ({cause})", retryable=True)
        if isinstance(exc, validation):
            return model_error(name, "response did not match the API schema", retryable=False)
        if isinstance(exc, httpx2.TimeoutException):
            return model_error(name, "request timed out", retryable=True)
        if isinstance(exc, httpx2.TransportError | httpx2.DecodingError):
            # a body that does not decode (a cut or mislabelled compressed one) failed as a cut
            # connection does; the SDKs wrap it so in some places and let it through in others
            return model_error(name, f"connection failed ({type(exc).__name__})", retryable=True)
        if isinstance(exc, json.JSONDecodeError):
            return model_error(name, "malformed stream: an event is not valid JSON", retryable=True)
        if isinstance(exc, UnicodeDecodeError):  # the SDKs decode each SSE line as UTF-8
            return model_error(name, "malformed stream: an event is not UTF-8", retryable=True)
        return model_error(name, f"unexpected {type(exc).__name__}", retryable=False)


SDK_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx2.TransportError,
    httpx2.DecodingError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)
"""Failures outside the SDK's own error classes that every adapter maps (see ``sdk_errors``)."""
