"""Conversation to Messages API messages and tools: the Anthropic adapter's wire format.

Kept apart from the streaming client (:mod:`.anthropic`) so the conversion, which is pure and
SDK-free, can be read, tested and reused on its own.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..messages import (
    ContentBlock,
    FileContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
)
from ..model import ModelError, ToolSpec

__all__ = [
    "API",
    "REDACTED_THINKING_PREFIX",
    "to_anthropic_messages",
    "to_anthropic_tools",
]

API = "anthropic-messages"
"""The ``api`` label of this adapter's messages; their thinking and tool blocks go back as-is."""

REDACTED_THINKING_PREFIX = "redacted_thinking:"
"""Marks a ThinkingContent signature that holds a ``redacted_thinking`` block's opaque data."""


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
    A final assistant message loses its trailing whitespace (:func:`_end_prefill`).
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
    if out and out[-1]["role"] == "assistant":
        _end_prefill(out)
    return out


def _end_prefill(out: list[dict[str, Any]]) -> None:
    """A conversation ending on a reply (one cut short, gone on from) asks the API to continue
    it, and the API refuses one ending in whitespace: its trailing text is trimmed, blocks left
    empty dropped, and the message too if nothing is left."""
    content = out[-1]["content"]
    while content and content[-1]["type"] == "text":
        text = content[-1]["text"].rstrip()
        if text:
            content[-1] = {**content[-1], "text": text}
            break
        content.pop()
    if not content:
        out.pop()


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
    # a result holds what a user message may: text, images, documents (a PDF a tool read)
    content = [b for b in map(_user_block, message.content) if b is not None]
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    if content:
        result["content"] = content
    if message.is_error:
        result["is_error"] = True
    return result
