"""The message model: what a conversation is made of, and how it looks on the wire.

Messages and content blocks are frozen pydantic models. Their JSON form omits every field other
than ``role`` and ``content`` (and a block's identifying fields) when it is empty, zero, false or
``None``, so stored entries stay small and equal messages always serialize identically.

Every message is encodable as UTF-8. Python strings can hold lone surrogates (``os.listdir``
returns ``"report\\udcff.txt"`` for a file name that is not UTF-8), which no store, JSON payload
or Temporal history can carry: building a :class:`Message` from Python objects replaces each one
with U+FFFD (a pair split in two code points is joined back). This is the message boundary, where
a tool result, a model reply or an input becomes a message, so a run never fails, and a tool
never re-runs, over text that cannot be encoded; NaN and infinities become ``None`` (a cost 0),
the ``null`` stores and Temporal hold (docs/design.md#store-contract). Messages pydantic validates
from JSON text need no check (its parser refuses a lone ``\\udcff`` escape); ``json.loads``
output is Python data, and checked.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic_core import core_schema as cs

from .timefmt import LenientTime, utc_now
from .wirefields import NullAsEmpty

__all__ = [
    "MAX_NESTING",
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
    "encodable_text",
    "error_tool_result_message",
    "tool_result_message",
    "user_file_message",
    "user_image_message",
    "user_message",
    "nests_deeper",
    "with_call_ids",
]

Role = Literal["user", "assistant", "tool_result"]
StopReason = Literal["stop", "length", "tool_use", "error", "aborted"]

_FALSY_EMPTY = frozenset({str, int, float, dict, list})
"""Types whose falsy values (``""``, ``0``, ``0.0``, ``{}``, ``[]``) a wire dump omits."""


MAX_NESTING = 100
"""Levels of objects and arrays a stored entry may nest, itself included: far above any tool's
arguments or an application's data, and well below what every reader of an entry parses
(Temporal's payload converter stops near 200, Python's parser where its stack ends), so what is
written is read back everywhere."""


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays more than ``limit`` levels deep, itself the
    first; without recursion, which the depths this refuses cannot be trusted to."""
    level = [value] if isinstance(value, dict | list | tuple) else []
    for _ in range(limit):
        level = [
            child
            for each in level
            for child in (each.values() if isinstance(each, dict) else each)
            if isinstance(child, dict | list | tuple)
        ]
        if not level:
            return False
    return bool(level)


def encodable_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD; a surrogate pair split in two code
    points is joined back into its character. Returns ``text`` itself when it is encodable."""
    if not _has_surrogate(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _has_surrogate(text: str) -> bool:
    # encoding is several times faster than a regex search, and an ASCII check faster still
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_LEAVES = frozenset({bool, int, float, type(None), datetime})


def _unencodable(value: Any) -> bool:
    """Whether any string in ``value`` (models, dicts, lists, keys included) holds a surrogate,
    or any number is NaN or an infinity; on every message built from Python objects."""
    if isinstance(value, str):
        return _has_surrogate(value)
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, BaseModel):
        items: Any = value.__dict__.values()
    elif isinstance(value, dict):
        if any(_unencodable(k) for k in value):
            return True
        items = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return False
    for item in items:
        if item.__class__ in _LEAVES:
            if item.__class__ is float and not math.isfinite(item):
                return True
            continue
        if item.__class__ is str:
            if _has_surrogate(item):
                return True
        elif _unencodable(item):
            return True
    return False


def _encodable(value: Any) -> Any:
    """``value`` with :func:`encodable_text` applied to every string, ``None`` for NaN and
    infinities (a model holding one becomes plain data, validated again by the caller)."""
    if isinstance(value, str):
        return encodable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, BaseModel):
        return _encodable(value.model_dump()) if _unencodable(value) else value
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(v) for v in value]
    return value


def _encodable_input(data: Any) -> Any:
    return _encodable(data) if _unencodable(data) else data


def _is_empty(value: Any) -> bool:
    """``None``, ``False`` or an empty/zero value of exactly one of :data:`_FALSY_EMPTY` (not a
    subclass, so ``True`` and a ``str`` enum are kept). Runs for every field of every dump."""
    return value is None or value is False or (type(value) in _FALSY_EMPTY and not value)


class WireModel(BaseModel):
    """Base for wire data: frozen, and its dump omits empty fields outside ``_wire_keep``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)
    _wire_keep: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _compact(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        keep = self._wire_keep
        return {k: v for k, v in data.items() if k in keep or not _is_empty(v)}


class Cost(WireModel):
    """Cost in the provider's currency, keyed as :class:`Usage`; ``null`` (a NaN cost) is 0."""

    input: Annotated[float, NullAsEmpty(float)] = 0.0
    output: Annotated[float, NullAsEmpty(float)] = 0.0
    cache_read: Annotated[float, NullAsEmpty(float)] = 0.0
    cache_write: Annotated[float, NullAsEmpty(float)] = 0.0
    reasoning: Annotated[float, NullAsEmpty(float)] = 0.0
    input_audio: Annotated[float, NullAsEmpty(float)] = 0.0
    output_audio: Annotated[float, NullAsEmpty(float)] = 0.0


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
    arguments: Annotated[dict[str, Any], NullAsEmpty(dict)] = Field(default_factory=dict)
    signature: str | None = None
    server: bool = False
    """True when the provider runs the tool itself; such calls need no tool result."""
    server_type: str | None = None
    output: ToolOutput | None = None
    _wire_keep = frozenset({"type", "id", "name"})


ContentBlock = Annotated[
    TextContent | ThinkingContent | ImageContent | FileContent | ToolCall,
    Field(discriminator="type"),
]


class Message(WireModel):
    """One conversation message: a user turn, an assistant reply or a tool result."""

    role: Role
    content: Annotated[list[ContentBlock], NullAsEmpty(list)] = Field(default_factory=list)
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

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        """Replace lone surrogates in Python input (see the module docstring), where a
        ``model_validator(mode="before")`` would: inside the model, so a built message passes
        as it is. JSON input cannot hold any, so it skips the check: a validator would run for
        JSON too, and make pydantic build Python objects of every message it decodes first.
        A model holding a message calls this again once the class is built: it gets the
        schema made then, check included."""
        schema: Any = handler(source)
        if cls.__dict__.get("__pydantic_complete__", False):
            return schema
        if schema["type"] != "model":
            raise TypeError(f"unexpected schema for {cls.__name__}: {schema['type']}")
        fields = schema["schema"]
        schema["schema"] = cs.json_or_python_schema(
            json_schema=fields,
            python_schema=cs.no_info_before_validator_function(_encodable_input, fields),
        )
        return schema

    def text(self) -> str:
        """All text blocks joined with no separator."""
        return "".join(b.text for b in self.content if isinstance(b, TextContent))

    def tool_calls(self) -> list[ToolCall]:
        """Every tool call in the message, server-side ones included."""
        return [b for b in self.content if isinstance(b, ToolCall)]


def with_call_ids(message: Message, seed: str | None = None) -> Message:
    """``message`` with an ID for every tool call that has none (``id=""``).

    A call without an ID cannot be answered durably: a result's empty ``tool_call_id`` is left
    out on the wire and reads back ``None``, so after a reload the call looks unanswered and is
    answered a second time. The derived ID is ``call_`` plus 16 hex characters of
    ``sha256(f"{seed}\\n{index}")``, ``index`` being the call's position in ``content``: the same
    message and seed always derive the same IDs, so a retried or replayed call stamps what the
    first attempt stamped. ``seed`` defaults to the message's own JSON (the Temporal worker
    passes the reply's entry ID). Returns ``message`` itself when every call has an ID.
    """
    if all(c.id for c in message.tool_calls()):
        return message
    basis = message.model_dump_json() if seed is None else seed
    content: list[ContentBlock] = []
    for index, block in enumerate(message.content):
        if isinstance(block, ToolCall) and not block.id:
            digest = hashlib.sha256(f"{basis}\n{index}".encode()).hexdigest()
            block = block.model_copy(update={"id": f"call_{digest[:16]}"})
        content.append(block)
    return message.model_copy(update={"content": content})


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
