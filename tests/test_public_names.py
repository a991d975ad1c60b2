"""What a typed consumer needs imports from the package root (docs/design.md#handle-and-engine):
the model request a scripted responder gets, the event types and their type names, message
parts, tool context and results, middleware and publisher types, and every error."""

from __future__ import annotations

import durable_agent

TYPED_CONSUMER_NAMES = [
    "AgentEvent",
    "AgentEventType",
    "ContentBlock",
    "EntryLike",
    "Event",
    "EventType",
    "FileContent",
    "ImageContent",
    "Middleware",
    "ModelEvent",
    "ModelRequest",
    "Publisher",
    "PublisherLike",
    "Runner",
    "TextContent",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "UnknownAgentError",
    "Usage",
    "render_tree",
]


def test_a_typed_consumer_imports_from_the_root() -> None:
    missing = [n for n in TYPED_CONSUMER_NAMES if n not in durable_agent.__all__]
    assert missing == []
    for name in TYPED_CONSUMER_NAMES:
        assert getattr(durable_agent, name) is not None


def test_unknown_agent_error_is_an_agent_error() -> None:
    assert issubclass(durable_agent.UnknownAgentError, durable_agent.AgentError)


def test_every_error_the_handle_or_a_store_raises_imports_from_the_root() -> None:
    from durable_agent.durable import errors as agent_errors
    from durable_agent.session import errors as session_errors

    names = [*agent_errors.__all__, *session_errors.__all__]
    assert [n for n in names if n not in durable_agent.__all__] == []
    assert durable_agent.InvalidRunInputError is agent_errors.InvalidRunInputError
