"""Entries, the session record, entry IDs and the session-ID rules."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent
from durable_agent.session import (
    MAX_SESSION_ID_LENGTH,
    CompactionEntry,
    InvalidSessionIdError,
    MessageEntry,
    SessionError,
    SessionRecord,
    new_id,
    validate_session_id,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def msg(text: str = "hi") -> Message:
    return Message(role="user", content=[TextContent(text=text)], timestamp=T0)


def test_message_entry_flags_default_false() -> None:
    e = MessageEntry(message=msg())
    assert (e.meta, e.ephemeral, e.synthetic) == (False, False, False)
    assert e.type == "message"
    assert e.parent_id is None


def test_compaction_entry_defaults() -> None:
    c = CompactionEntry(summary="s")
    assert c.first_kept_id == ""
    assert c.tokens_before == 0
    assert c.type == "compaction"


def test_entries_are_frozen() -> None:
    e = MessageEntry(message=msg())
    with pytest.raises(ValueError):
        e.meta = True  # type: ignore[misc]


def test_empty_parent_id_is_none_in_models() -> None:
    assert MessageEntry(message=msg(), parent_id="").parent_id is None
    assert CompactionEntry(summary="s", parent_id="").parent_id is None


def test_created_at_is_aware_utc() -> None:
    e = MessageEntry(message=msg(), created_at=datetime(2026, 1, 2, 3, 4, 5))
    assert e.created_at == T0
    assert e.created_at.utcoffset() == timedelta(0)
    assert MessageEntry(message=msg()).created_at.tzinfo is not None


def test_session_record_has_exactly_three_fields() -> None:
    assert list(SessionRecord.model_fields) == ["id", "parent_id", "created_at"]
    r = SessionRecord(id="s1", created_at=T0)
    assert r.parent_id is None
    with pytest.raises(ValueError):
        r.id = "s2"  # type: ignore[misc]


def test_new_id_is_16_lowercase_hex() -> None:
    ids = [new_id() for _ in range(500)]
    for i in ids:
        assert re.fullmatch(r"[0-9a-f]{16}", i), i
    assert len(set(ids)) == len(ids)


def test_new_id_is_eight_bytes_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def fake(n: int) -> bytes:
        asked.append(n)
        return bytes.fromhex("9f86d081884c7d65")

    monkeypatch.setattr(secrets, "token_bytes", fake)
    assert new_id() == "9f86d081884c7d65"
    assert asked == [8]


@pytest.mark.parametrize(
    "sid",
    [
        "a",
        "user-42",
        "ticket_9.v2",
        "tenant:thread@example.com",
        "ABCxyz019-_.:@",
        "...",
        ".hidden",
        "a..b",
        "x" * MAX_SESSION_ID_LENGTH,
    ],
)
def test_valid_session_ids(sid: str) -> None:
    assert validate_session_id(sid) == sid


@pytest.mark.parametrize(
    "sid",
    [
        "",
        ".",
        "..",
        "x" * (MAX_SESSION_ID_LENGTH + 1),
        "a/b",
        "../etc/passwd",
        "a\\b",
        "a b",
        "tab\there",
        "line\n",
        "\nline",
        "nul\x00",
        "é",
        "café",
        "\uff46ull",  # fullwidth f
        "a$b",
        "$ne",
        "a*",
        "a#b",
        "a+b",
        "a%2F",
        "q?x=1",
    ],
)
def test_invalid_session_id_strings(sid: str) -> None:
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(sid)


@pytest.mark.parametrize(
    "sid",
    [None, 5, 1.5, b"abc", ["a"], ("a",), {"$ne": None}, {"$gt": ""}, {"$regex": ".*"}, object()],
)
def test_non_str_session_ids_rejected(sid: Any) -> None:
    with pytest.raises(InvalidSessionIdError):
        validate_session_id(sid)


def test_session_id_limits() -> None:
    assert MAX_SESSION_ID_LENGTH == 200


def test_invalid_session_id_error_is_value_error_and_session_error() -> None:
    assert issubclass(InvalidSessionIdError, ValueError)
    assert issubclass(InvalidSessionIdError, SessionError)
    with pytest.raises(ValueError):
        validate_session_id("../x")
