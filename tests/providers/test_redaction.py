"""Redaction by the configured key's value, its prefixes and any run of it.

A provider that echoes the rejected key partially masked (``gsk_b72f0b********Yodd``, an
OpenAI-compatible server's style), cut (no ``sk-`` prefix, a slice of its middle) or encoded (the
``Authorization`` header in base64, the key URL-encoded) must not get any identifying part of it
into a ModelError, whatever the key's shape: the redaction works from the key itself, not from a
pattern (docs/design.md#errors).
"""

from __future__ import annotations

import base64
import secrets
import time
import traceback
import urllib.parse
from typing import Any

import pytest

from durable_agent.ai import ModelRequest, user_message
from durable_agent.ai.providers.anthropic import AnthropicModel
from durable_agent.ai.providers.openai import OpenAIChatModel
from durable_agent.ai.redaction import REDACTED, configured_secrets, redact

from .conftest import failure, leaks
from .replay_server import ECHOES, RecordedResponse, ReplayServer, echo

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


# --- key fragments: any 12-character run of the key, raw, base64 or URL-encoded ------------------


def openai_key() -> str:
    """An OpenAI-shaped key with characters URL encoding changes, built at run time."""
    body = secrets.token_urlsafe(36)
    return f"sk-proj-{body[:20]}/{body[20:30]}+{body[30:]}"


def forms(key: str) -> list[str]:
    """The key as the hostile provider may echo it (raw, base64 at every byte alignment, URL-
    encoded), for :func:`runs_of`."""
    raw = key.encode()
    out = [key, urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key)]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()[4 if pad else 0 : -4]
        out += [encoded, encoded.replace("+", "-").replace("/", "_")]
    return out


def runs_of(key: str, text: str, length: int = 12) -> list[str]:
    """Every ``length``-character run of any form of ``key`` that ``text`` holds."""
    return sorted(
        {
            form[i : i + length]
            for form in forms(key)
            for i in range(len(form) - length + 1)
            if form[i : i + length] in text
        }
    )


@pytest.mark.parametrize("name", sorted(ECHOES))
def test_every_echoed_form_of_the_key_is_redacted(name: str) -> None:
    key = openai_key()
    echoed = echo(b"{{" + name.encode() + b"}}", {"authorization": f"Bearer {key}"}).decode()
    text = f"Incorrect API key provided: {echoed}."
    redacted = redact(text, [key])
    assert runs_of(key, redacted) == [], redacted
    assert redacted.startswith("Incorrect API key provided: ") and REDACTED in redacted


def test_a_run_of_twelve_characters_is_redacted_and_eleven_are_not() -> None:
    key = openai_key()
    middle = len(key) // 2
    assert redact(f"key …{key[middle : middle + 12]}… rejected", [key]) == (
        f"key …{REDACTED}… rejected"
    )
    eleven = f"near {key[middle : middle + 11]} miss"
    assert redact(eleven, [key]) == eleven
    plain = "a base64 body: " + base64.b64encode(b"nothing secret in here at all").decode()
    assert redact(plain, [key]) == plain


@pytest.mark.parametrize("name", sorted(ECHOES))
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_hostile_echo_never_reaches_the_model_error(
    replay: ReplayServer, provider: str, name: str
) -> None:
    """The adapter's error path: a 401 whose message echoes the request's key in one form."""
    key = openai_key()
    body: dict[str, Any] = {
        "type": "error",
        "error": {"message": f"bad key {{{{{name}}}}} (rejected)", "type": "authentication_error"},
    }
    replay.enqueue(RecordedResponse.json(401, body, echo=True))
    lm: OpenAIChatModel | AnthropicModel
    if provider == "openai":
        lm = OpenAIChatModel("m", api_key=key, base_url=f"{replay.url}/v1")
    else:
        lm = AnthropicModel("m", api_key=key, base_url=replay.url, timeout=10)

    error, _ = await failure(lm, hello())
    await lm.aclose()

    sent = replay.requests[0].headers
    assert key in sent.get("authorization", "") + sent.get("x-api-key", "")
    for rendering in (str(error), repr(error), "".join(traceback.format_exception(error))):
        assert runs_of(key, rendering) == [], rendering
    assert f"bad key {REDACTED} (rejected)" in str(error)


def test_redaction_is_linear_on_long_runs_of_key_and_mask_characters() -> None:
    """Error text with a long masked-looking or key-looking run (a markdown rule, a base64
    blob) is redacted in linear time: a quadratic pattern made 2,000 ``*`` take seconds, and
    these 300,000 characters would take hours."""
    key = openai_key()
    text = "x" + "*" * 100_000 + " a" + "." * 100_000 + " " + secrets.token_urlsafe(75_000)
    started = time.perf_counter()
    assert redact(text + key[5:25], [key]).endswith(REDACTED)
    assert time.perf_counter() - started < 5
