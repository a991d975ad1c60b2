"""Redaction by the configured key's value and its prefixes (issue 16 item 10).

A provider that echoes the rejected key partially masked (``gsk_b72f0b********Yodd``, an
OpenAI-compatible server's style) must not get any identifying part of it into a ModelError,
whatever the key's shape: the redaction works from the key itself, not from a pattern.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from durable_agent.ai import ModelRequest, user_message
from durable_agent.ai.providers.openai import OpenAIChatModel
from durable_agent.ai.redaction import REDACTED, configured_secrets, redact

from .conftest import failure, leaks
from .replay_server import RecordedResponse, ReplayServer

HEAD, TAIL = "gsk_b72f0b", "Yodd"


def groq_key() -> str:
    """A key shaped like Groq's, built at run time (never in a source line)."""
    return HEAD + secrets.token_urlsafe(33)[:42] + TAIL


def fragments(key: str) -> list[str]:
    """What identifies ``key`` in a masked echo."""
    return [key, key[:8], f"{HEAD}****", f"*{TAIL}"]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Invalid API Key: {head}********{tail}", "Invalid API Key: [redacted]"),
        ("Invalid API Key: {head}…{tail}.", "Invalid API Key: [redacted]"),
        ("key={head6}****", "key=[redacted]"),
        ("key ending ****{tail}.", "key ending [redacted]."),
        ("truncated {head}", "truncated [redacted]"),
        ("in full: {key}!", "in full: [redacted]!"),
        ('{{"key": "{head}xxxxxxxx{tail}"}}', '{"key": "[redacted]"}'),
    ],
)
def test_masked_and_cut_copies_of_a_given_key_are_redacted(template: str, expected: str) -> None:
    key = groq_key()
    text = template.format(key=key, head=HEAD, head6=key[:6], tail=TAIL)
    assert redact(text, [key]) == expected


def test_unrelated_text_is_left_alone() -> None:
    key = groq_key()
    text = f"gsk_ keys start so; {TAIL} is a name; nothing else here"
    assert redact(text, [key]) == text
    # a short secret is only redacted whole: its prefix could be an ordinary word
    assert redact("password failed: password1", ["password1"]) == f"password failed: {REDACTED}"


def test_configured_secrets_are_the_credential_variables() -> None:
    env = {
        "GROQ_API_KEY": "gsk_0123456789",
        "GITHUB_TOKEN": "ghp_0123456789",
        "DB_PASSWORD": "hunter2hunter2",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "MY_APIKEY": "0123456789abcdef",
        "AWS_SECRET": "short",
        "HOME": "/root/somewhere",
        "TOKENIZER": "whitespace-tokenizer",
        "MONKEY": "not-a-credential",
        "MONGODB_URI": "mongodb://localhost:27017/db",
        "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcloud/creds.json",
        "SIGNING_KEY": "https://vault.example/key",
    }
    assert configured_secrets(env) == [
        "gsk_0123456789",
        "ghp_0123456789",
        "hunter2hunter2",
        "wJalrXUtnFEMI/K7MDENG",
        "0123456789abcdef",
    ]


def hello() -> ModelRequest:
    return ModelRequest(messages=[user_message("hi")])


async def test_a_partially_masked_echo_never_reaches_the_error(replay: ReplayServer) -> None:
    key = groq_key()
    masked = f"{key[:10]}{'*' * 8}{key[-4:]}"
    body: dict[str, Any] = {
        "error": {
            "message": f"Invalid API Key: {masked}",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    replay.enqueue(RecordedResponse.json(401, body))
    lm = OpenAIChatModel("m", api_key=key, base_url=f"{replay.url}/v1", provider="groq")

    error, _ = await failure(lm, hello())
    await lm.aclose()

    assert replay.requests[0].headers["authorization"] == f"Bearer {key}"
    assert not error.retryable
    for fragment in fragments(key):
        assert leaks(error, fragment) == [], fragment
    assert str(error) == "groq: HTTP 401 invalid_request_error: Invalid API Key: [redacted]"
