"""The message model: what a conversation is made of, and how it looks on the wire.

Messages and content blocks are frozen pydantic models. Their JSON form omits every field other
than ``role`` and ``content`` (and a block's identifying fields) when it is empty, zero, false or
``None``, so stored entries stay small and equal messages always serialize identically.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from .timefmt import format_time, parse_time, to_utc, utc_now

__all__ = [
    "ContentBlock",
    "Cost",
    "FileContent",
    "ImageContent",
    "Message",
    "Role",
    "StopReason",
    "TextContent",
    "ThinkingContent",
    "ToolCall",
    "ToolOutput",
    "Usage",
    "assistant_message",
    "error_tool_result_message",
    "tool_result_message",
    "user_file_message",
    "user_image_message",
    "user_message",
]

Role = Literal["user", "assistant", "tool_result"]
StopReason = Literal["stop", "length", "tool_use", "error", "aborted"]

_EMPTY: tuple[Any, ...] = (None, False, "", 0, 0.0, {}, [])


def _is_empty(value: Any) -> bool:
    return any(value is e or (type(value) is type(e) and value == e) for e in _EMPTY)


class WireModel(BaseModel):
    """Base for wire data: frozen, and its dump omits empty fields outside ``_wire_keep``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)
    _wire_keep: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _compact(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self._wire_keep or not _is_empty(v)}


class Cost(WireModel):
    """Cost in the provider's currency, with the same keys as :class:`Usage`."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    reasoning: float = 0.0
    input_audio: float = 0.0
    output_audio: float = 0.0


class Usage(WireModel):
    """Token counts one model call reported."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reasoning: int = 0
    input_audio: int = 0
    output_audio: int = 0
    cost: Cost = Field(default_factory=Cost)

    def __add__(self, other: Usage) -> Usage:
        def total(name: str) -> Any:
            return getattr(self, name) + getattr(other, name)

        cost = Cost(
            **{k: getattr(self.cost, k) + getattr(other.cost, k) for k in Cost.model_fields}
        )
        return Usage(**{k: total(k) for k in Usage.model_fields if k != "cost"}, cost=cost)


class TextContent(WireModel):
    type: Literal["text"] = "text"
    text: str
    signature: str | None = None
    _wire_keep = frozenset({"type", "text"})


class ThinkingContent(WireModel):
    """Model reasoning; ``signature`` must survive store round trips (providers verify it)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    _wire_keep = frozenset({"type", "thinking"})


class ImageContent(WireModel):
    type: Literal["image"] = "image"
    data: str
    """Base64-encoded image bytes."""
    mime_type: str
    _wire_keep = frozenset({"type", "data", "mime_type"})


class FileContent(WireModel):
    """A document, given inline (``data``, base64), by ``url`` or by a provider ``file_id``."""

    type: Literal["file"] = "file"
    data: str | None = None
    url: str | None = None
    file_id: str | None = None
    mime_type: str | None = None
    filename: str | None = None
    _wire_keep = frozenset({"type"})


class ToolOutput(WireModel):
    """The result of a server-side tool the provider ran itself."""

    content: list[ContentBlock] = Field(default_factory=list)
    raw: Any = None
    is_error: bool = False


class ToolCall(WireModel):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    signature: str | None = None
    server: bool = False
    """True when the provider runs the tool itself; such calls need no tool result."""
    server_type: str | None = None
    output: ToolOutput | None = None
    _wire_keep = frozenset({"type", "id", "name"})

    @field_validator("arguments", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


ContentBlock = Annotated[
    TextContent | ThinkingContent | ImageContent | FileContent | ToolCall,
    Field(discriminator="type"),
]


def _lenient_time(value: Any) -> datetime | None:
    """Wire timestamps that cannot be parsed read as ``None`` rather than failing the entry."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, str):
        try:
            return parse_time(value)
        except ValueError:
            return None
    return None


def _format_optional(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


LenientTime = Annotated[
    datetime | None,
    BeforeValidator(_lenient_time),
    PlainSerializer(_format_optional, when_used="json"),
]


class Message(WireModel):
    """One conversation message: a user turn, an assistant reply or a tool result."""

    role: Role
    content: list[ContentBlock] = Field(default_factory=list)
    # assistant only
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    error: str | None = None
    usage: Usage | None = None
    stop_reason: StopReason | None = None
    # tool_result only
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    timestamp: LenientTime = None

    _wire_keep = frozenset({"role", "content"})

    @field_validator("content", mode="before")
    @classmethod
    def _null_content(cls, value: Any) -> Any:
        return [] if value is None else value

    def text(self) -> str:
        """All text blocks joined with no separator."""
        return "".join(b.text for b in self.content if isinstance(b, TextContent))

    def tool_calls(self) -> list[ToolCall]:
        """Every tool call in the message, server-side ones included."""
        return [b for b in self.content if isinstance(b, ToolCall)]


def user_message(text: str) -> Message:
    return Message(role="user", content=[TextContent(text=text)], timestamp=utc_now())


def user_image_message(text: str, *images: ImageContent) -> Message:
    return Message(role="user", content=[TextContent(text=text), *images], timestamp=utc_now())


def user_file_message(text: str, *files: FileContent) -> Message:
    return Message(role="user", content=[TextContent(text=text), *files], timestamp=utc_now())


def assistant_message(*blocks: ContentBlock) -> Message:
    return Message(role="assistant", content=list(blocks), timestamp=utc_now())


def tool_result_message(tool_call_id: str, tool_name: str, *blocks: ContentBlock) -> Message:
    return Message(
        role="tool_result",
        content=list(blocks),
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        timestamp=utc_now(),
    )


def error_tool_result_message(
    tool_call_id: str, tool_name: str, text: str, *, timestamp: datetime | None = None
) -> Message:
    """An error result: the one constructor of every result the library writes itself
    (failed, cancelled, interrupted). ``timestamp`` defaults to now (a workflow passes its own
    clock; run-start repair the dangling message's time)."""
    return Message(
        role="tool_result",
        content=[TextContent(text=text)],
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        is_error=True,
        timestamp=timestamp if timestamp is not None else utc_now(),
    )


ToolOutput.model_rebuild()
ToolCall.model_rebuild()
Message.model_rebuild()
