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


def _with(error: BaseException, **attributes: str) -> BaseException:
    for name, value in attributes.items():
        setattr(error, name, value)
    return error


def _every_public_error() -> list[BaseException]:
    """One instance of each error a user of the library may catch, built as the library does."""
    from durable_agent.ai.providers import ProviderConfigError
    from durable_agent.server.runs import RunNotFoundError, RunsUnavailableError
    from durable_agent.workflows import StoreMismatchError, TemporalUnavailableError
    from durable_agent.workflows.config import (
        ConnectSettings,
        TemporalConfigError,
        TemporalConnectError,
    )

    d = durable_agent
    settings = ConnectSettings("h:1", "default", False, None, "default", "TEMPORAL_ADDRESS")
    return [
        d.SessionError("s"),
        d.SessionNotFoundError("s1"),
        d.SessionExistsError("s1", "it diverged"),
        d.ParentNotFoundError("s1", "e1", "p1"),
        d.InvalidSessionIdError("bad id"),
        d.EntryConflictError("s1", "e1"),
        d.EntryDecodeError("bad json"),
        d.EntryEncodeError("s1", "e1", "a set has no JSON form"),
        d.CorruptSessionError("s1", "bad header", line=3, path="/data/s1.jsonl"),
        d.EntryTooLargeError("s1", "e1", 10, 5),
        d.StoreUnavailableError("down"),
        d.AgentClosedError("closed"),
        d.InvalidRunInputError("options.max_turns", "must be at least 1"),
        d.ApprovalNotPendingError("decided", tool_call_id="c1", decision_id="d1"),
        d.RunCancelledError("run cancelled"),
        d.UnknownAgentError("unknown agent 'x'"),
        StoreMismatchError("other store"),
        _with(TemporalUnavailableError("no worker has taken the message yet"), message_id="m1"),
        RunNotFoundError("no run"),
        RunsUnavailableError("read only"),
        d.ModelError("overloaded", retryable=True, retry_after=1.5),
        ProviderConfigError("OPENAI_API_KEY is not set"),
        TemporalConfigError("no profile 'x'"),
        TemporalConnectError(settings, "Connection refused"),
    ]


def test_every_error_pickles_and_copies_as_it_was() -> None:
    """Errors cross processes (multiprocessing, a task queue, pytest-xdist) and get deep-copied:
    each comes back as its own type, with its message and attributes as they were."""
    import copy
    import pickle

    for error in _every_public_error():
        for back in (pickle.loads(pickle.dumps(error)), copy.deepcopy(error)):
            assert type(back) is type(error)
            assert str(back) == str(error)
            assert back.args == error.args
            assert vars(back) == vars(error)
