"""Messages, tools, the language-model protocol and the ScriptedModel.

Where a turn goes through this package: the loop hands a :class:`ModelRequest` to a
:class:`LanguageModel` (a provider adapter in :mod:`.providers`, or :class:`ScriptedModel`), which
streams deltas and ends with the complete assistant :class:`Message`; a tool call in it names a
:class:`Tool`, whose result comes back as a ``tool_result`` message
(docs/design.md#sessions-and-entries).
"""

from .messages import (
    ContentBlock,
    Cost,
    FileContent,
    ImageContent,
    Message,
    Role,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolOutput,
    Usage,
    assistant_message,
    encodable_text,
    error_tool_result_message,
    tool_result_message,
    user_file_message,
    user_image_message,
    user_message,
    with_call_ids,
)
from .model import LanguageModel, ModelError, ModelEvent, ModelRequest, ToolSpec
from .scripted import Reply, ScriptedModel
from .timefmt import UtcDatetime, format_time, parse_time
from .tools import RetryPolicy, Tool, ToolContext, ToolResult, tool

__all__ = [
    "ContentBlock",
    "Cost",
    "FileContent",
    "ImageContent",
    "LanguageModel",
    "Message",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "Reply",
    "RetryPolicy",
    "Role",
    "ScriptedModel",
    "StopReason",
    "TextContent",
    "ThinkingContent",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UtcDatetime",
    "assistant_message",
    "encodable_text",
    "error_tool_result_message",
    "format_time",
    "parse_time",
    "tool",
    "tool_result_message",
    "user_file_message",
    "user_image_message",
    "user_message",
    "with_call_ids",
]
