"""The adapters' shared helpers: retry hints, redaction, tool-argument parsing, error building."""

from __future__ import annotations

import json
import pickle

import pytest

from durable_agent.ai import ModelError
from durable_agent.ai.providers._common import (
    call_arguments,
    final_arguments,
    model_error,
    partial_arguments,
    redact,
    retry_after_seconds,
    status_retryable,
)

NOW = 1764684642.0  # Tue, 02 Dec 2025 14:10:42 GMT


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Tue, 02 Dec 2025 14:11:12 GMT"}, 30.0),
        ({"retry-after": "Tue, 02 Dec 2025 14:00:00 GMT"}, 0.0),  # in the past: retry now
        ({"retry-after": "-3"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, now=NOW) == expected


def test_retryable_statuses() -> None:
    retryable = [s for s in range(400, 600) if status_retryable(s)]
    assert retryable[:3] == [408, 409, 429]
    assert retryable[3:] == list(range(500, 600))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Incorrect API key provided: sk-proj-abc123XYZ.",
            "Incorrect API key provided: [redacted].",
        ),
        ("masked sk-abc1****************wxyz here", "masked [redacted] here"),
        ('{"authorization": "Bearer tok_123"}', '{"authorization": "Bearer [redacted]"}'),
        ("x-api-key: abcdef123, next", "x-api-key: [redacted], next"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [redacted]"),
        ("api_key=hunter2hunter2&x=1", "api_key=[redacted]&x=1"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_redact_patterns(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_redact_exact_secrets_of_any_shape() -> None:
    assert redact("key=plainsecret99 and plainsecret99", ["plainsecret99", None, ""]) == (
        "key=[redacted] and [redacted]"
    )


def test_model_error_is_bounded_redacted_and_pickles() -> None:
    error = model_error(
        "openai",
        "HTTP 429",
        detail="slow down  sk-live-123456789\n" + "x" * 2000,
        retryable=True,
        retry_after=2.5,
    )

    assert str(error).startswith("openai: HTTP 429: slow down [redacted] xxx")
    assert str(error).endswith("… (retry after 2.5s)")
    assert len(str(error)) < 600
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ModelError)
    assert (str(copy), copy.retryable, copy.retry_after) == (str(error), True, 2.5)


@pytest.mark.parametrize(
    ("raw", "partial", "final"),
    [
        ("", {}, {}),
        ('{"city": "Pa', {"city": "Pa"}, None),
        ('{"a": [1, 2', {"a": [1, 2]}, None),
        ('{"a": 1}', {"a": 1}, {"a": 1}),
        ("[1, 2]", {}, None),  # valid JSON, but not an object
        ("{not json", {}, None),
        ('{"x": NaN}', {}, None),  # Python's parsers take NaN and the infinities; JSON has not
        ('{"x": [1, -Infinity]}', {}, None),
    ],
)
def test_argument_parsing(raw: str, partial: dict[str, object], final: object) -> None:
    assert partial_arguments(raw) == partial
    assert final_arguments(raw) == final


@pytest.mark.parametrize(
    "raw",
    [
        '{"x": 1e400}',  # past a float's range: Python's parser makes it an infinity
        '{"x": [2, -1E+999]}',
        '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}",  # deeper than Python's parser goes
        '{"x": ' + "[" * 196 + "]" * 196 + "}",  # a reply Temporal's converter could not read
        '{"x": ' + "[" * 50 + "]" * 50 + "}",  # more than half of what an entry may nest
    ],
    ids=["1e400", "-1E+999", "deep", "196", "51"],
)
def test_arguments_no_store_can_keep_are_not_arguments(raw: str) -> None:
    """Refused as NaN is (the adapter's retryable "not a JSON object"), never a reply whose
    store turns an infinity into ``null`` (the tool in process got ``inf``, on Temporal
    ``None``), nor a ``RecursionError`` out of the model call."""
    assert final_arguments(raw) is None


def test_arguments_nested_as_deep_as_a_tool_may_want_are_kept() -> None:
    raw = '{"x": ' + "[" * 49 + "]" * 49 + "}"
    assert final_arguments(raw) == json.loads(raw)


def test_numbers_json_holds_are_kept_exactly() -> None:
    raw = '{"tiny": 1e-400, "big": 123456789012345678901234567890, "neg": -0.0}'
    assert final_arguments(raw) == {"tiny": 0.0, "big": 123456789012345678901234567890, "neg": -0.0}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"path": "notes.txt", "text": "first li', None),
        ('{"to": "ann", "x": 1e400', None),
        ('{"to": "ann", "x": ' + "[" * 120, None),
        ("", None),  # cut right after the call's name
        ('{"path": "notes.txt"}', {"path": "notes.txt"}),  # whole before the limit fell
    ],
    ids=["mid-string", "1e400", "deep", "no text", "whole"],
)
def test_a_call_cut_at_the_token_limit_has_no_arguments(
    raw: str, expected: dict[str, str] | None
) -> None:
    """A reply cut at its token limit inside a call: the call is no call to run (its adapter
    leaves it out), whatever part of its arguments parses; one whole before the cut is kept."""
    assert call_arguments("p", raw, truncated=True, malformed="not a JSON object") == expected
