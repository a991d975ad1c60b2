"""Conversation to Chat Completions messages and tools: the OpenAI adapter's wire format.

Kept apart from the streaming client (:mod:`.openai`) so the conversion, which is pure and
SDK-free, can be read, tested and reused on its own.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ..messages import ContentBlock, FileContent, ImageContent, Message, TextContent
from ..model import ModelError, ToolSpec

__all__ = ["to_openai_messages", "to_openai_tools"]


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Chat Completions ``function`` tools."""
    out: list[dict[str, Any]] = []
    for spec in tools:
        function: dict[str, Any] = {"name": spec.name}
        if spec.description:
            function["description"] = spec.description
        function["parameters"] = spec.parameters
        out.append({"type": "function", "function": function})
    return out


def to_openai_messages(
    system_prompt: str,
    messages: list[Message],
    *,
    system_role: Literal["system", "developer"] = "system",
) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages.

    Thinking blocks are dropped (Chat Completions takes no reasoning back) and so are server-side
    tool calls. An error result is sent with an ``Error:`` prefix, the API having no error flag.
    Tool messages carry text only, so images and files a tool returned follow the results in one
    user message.
    An assistant message with nothing to send (an error with no content) is left out.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": system_role, "content": system_prompt})
    tool_media: list[dict[str, Any]] = []

    def flush_tool_media() -> None:
        if tool_media:
            intro = {"type": "text", "text": "Images and files returned by the tool calls above:"}
            out.append({"role": "user", "content": [intro, *tool_media]})
            tool_media.clear()

    for message in messages:
        if message.role != "tool_result":
            flush_tool_media()
        if message.role == "user":
            out.append({"role": "user", "content": _user_content(message.content)})
        elif message.role == "assistant":
            converted = _assistant(message)
            if converted is not None:
                out.append(converted)
        else:
            text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
            if message.is_error:
                text = f"Error: {text}"
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}
            )
            tool_media.extend(
                _image_part(b) if isinstance(b, ImageContent) else _file_part(b)
                for b in message.content
                if isinstance(b, ImageContent | FileContent)
            )
    flush_tool_media()
    return out


def _user_content(blocks: list[ContentBlock]) -> str | list[dict[str, Any]]:
    if all(isinstance(b, TextContent) for b in blocks) and len(blocks) <= 1:
        return blocks[0].text if blocks and isinstance(blocks[0], TextContent) else ""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(_image_part(block))
        elif isinstance(block, FileContent):
            parts.append(_file_part(block))
    return parts


def _image_part(block: ImageContent) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
    }


def _file_part(block: FileContent) -> dict[str, Any]:
    if block.file_id:
        return {"type": "file", "file": {"file_id": block.file_id}}
    if block.data:
        mime = block.mime_type or "application/octet-stream"
        file: dict[str, Any] = {"file_data": f"data:{mime};base64,{block.data}"}
        file["filename"] = block.filename or "file"
        return {"type": "file", "file": file}
    raise ModelError(
        "openai-chat: files by URL are not supported by Chat Completions; give data or file_id",
        retryable=False,
    )


def _compact_json(value: object) -> str:
    """Arguments as the API itself writes them: no spaces, non-ASCII kept (fewer tokens)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _assistant(message: Message) -> dict[str, Any] | None:
    text = message.text()
    calls = [c for c in message.tool_calls() if not c.server]
    if not text and not calls:
        return None
    converted: dict[str, Any] = {"role": "assistant"}
    if text:
        converted["content"] = text
    if calls:
        converted["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _compact_json(call.arguments)},
            }
            for call in calls
        ]
    return converted
