"""The two adapters as the provider tests build them, and what each says where they agree.

The tests of one adapter's wire format stay in its own files; the failures both adapters meet
the same way (a broken stream, a timeout, a refused connection) run once per adapter from
``test_adapter_failures.py``, with the words each adapter uses for them here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable_agent.ai import ModelRequest, user_message
from durable_agent.ai.providers.adapter import StreamingAdapter
from durable_agent.ai.providers.anthropic import AnthropicModel
from durable_agent.ai.providers.openai import OpenAIChatModel

OPENAI_KEY = "sk-canary-7f3a9c2e1b8d4f60a5e7"
"""The key every OpenAI test uses; the 401 fixture echoes it back, as OpenAI does."""

ANTHROPIC_KEY = "sk-ant-canary-7f3a9c2e1b8d4f60a5e7"
"""The key every Anthropic test uses; the 401 fixture (a gateway) echoes it back."""


def openai_model(url: str, timeout: float = 10) -> OpenAIChatModel:
    """The OpenAI adapter against the replay server at ``url``."""
    return OpenAIChatModel(
        "gpt-4.1-mini", api_key=OPENAI_KEY, base_url=f"{url}/v1", timeout=timeout
    )


def anthropic_model(url: str, timeout: float = 10) -> AnthropicModel:
    """The Anthropic adapter against the replay server at ``url``."""
    return AnthropicModel("claude-sonnet-4-6", api_key=ANTHROPIC_KEY, base_url=url, timeout=timeout)


@dataclass(frozen=True)
class Adapter:
    """One adapter: its name (the prefix of its errors and the folder of its recordings), how
    to build it, and its own words for what both adapters meet."""

    name: str
    make: Callable[[str, float], StreamingAdapter[Any]]
    ended_early: str
    """The error of a stream that ends before the reply finished."""
    rate_limited: str
    """How the error of the recorded 429 begins."""
    no_usage: str
    """The error of a stream that finished its reply but ended before reporting its usage."""


ADAPTERS = [
    Adapter(
        "openai",
        openai_model,
        ended_early="openai: stream ended before the model finished (no finish_reason)",
        rate_limited="openai: HTTP 429 tokens: Rate limit reached for gpt-4.1-mini",
        no_usage="openai: stream ended before the usage chunk it promised",
    ),
    Adapter(
        "anthropic",
        anthropic_model,
        ended_early="anthropic: stream ended before message_stop",
        rate_limited="anthropic: HTTP 429 rate_limit_error: This request would exceed",
        no_usage="anthropic: stream ended without message_delta (no stop_reason nor usage)",
    ),
]


def hello() -> ModelRequest:
    return ModelRequest(messages=[user_message("Say hello")])
