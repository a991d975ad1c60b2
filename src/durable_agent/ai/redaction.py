"""Secret redaction: no configured credential, whole, masked or cut short, leaves in a message.

Provider error bodies echo the key they rejected, in full or masked but still identifying
(OpenAI's ``sk-abc1****wxyz``, an OpenAI-compatible server's ``gsk_b72f0b********Yodd``). Error
text travels into workflow history, logs and CLI output, so :func:`redact` masks, for every
secret it is given:

- the exact value;
- the value's first eight characters (or first six right before a mask run like ``****``) and
  whatever credential characters follow: a truncated or masked copy;
- a mask run followed by the value's last four characters (``********Yodd``).

On top of that it masks what merely looks like a key (``sk-…``, ``Bearer …``, ``api_key=…``), for
secrets nobody passed. :func:`configured_secrets` lists the credentials an environment holds
(``*_KEY``, ``*_TOKEN``, ``*_SECRET``, …), for callers that only know the environment (the
worker's error path, the CLI).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["REDACTED", "configured_secrets", "redact"]

REDACTED = "[redacted]"

_TOKEN = r"(?!\[redacted\])[^\s\"'&,;()\[\]{}]+"
"""A credential-like value: up to a delimiter, and not one already redacted."""

_PATTERNS = [
    # "Bearer <token>" (or "Basic <token>") from an echoed Authorization header.
    (re.compile(rf"(?i)\b((?:bearer|basic)\s+){_TOKEN}"), rf"\1{REDACTED}"),
    # OpenAI ("sk-", "sk-proj-") and Anthropic ("sk-ant-") keys, masked ("sk-abc***xyz") or not.
    (re.compile(r"\bsk-[A-Za-z0-9_\-*.]{3,}[A-Za-z0-9_\-*]"), REDACTED),
    # "api_key=...", "x-api-key: ...", "authorization: ..." as echoed in some error bodies; a
    # "Bearer"/"Basic" scheme word is left for the first pattern.
    (
        re.compile(
            r"(?i)\b(api[_-]?key|x-api-key|authorization)([\"']?\s*[:=]\s*[\"']?)"
            rf"(?!(?:bearer|basic)\s){_TOKEN}"
        ),
        rf"\1\2{REDACTED}",
    ),
]

_MASK = "*•·…#."
"""Characters providers mask a key with."""
_CRED = r"[A-Za-z0-9_\-+/=*•·…#.]"
"""A character of a key or of its masked form."""
_LEAD = r"[A-Za-z0-9_\-+/]"
"""A key character before a mask run (not ``=``: ``key=****Yodd`` keeps ``key=``)."""
_END = r"(?![A-Za-z0-9_\-+/=])"
"""The shown tail ends the key (a sentence's full stop may follow)."""
_MASKED = rf"[{re.escape(_MASK)}]{{3,}}"

_PREFIX = 8
"""Leading characters of a key that identify it (``gsk_b72f``); six before a mask run."""
_SUFFIX = 4
"""Trailing characters shown after a mask run (``****Yodd``)."""
_FUZZY_MIN = 12
"""Shorter secrets are only masked whole: their prefixes could be ordinary words."""

_NOT_A_KEY = re.compile(r"^[/.~]|^[A-Za-z]:\\|://|\s")
_SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:api)?(?:key|token|secret|password|passwd|credential)s?$")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without the given secrets (whole, prefix-cut or masked) or anything shaped like
    a key or bearer token."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
        if len(secret) >= _FUZZY_MIN:
            text = _pattern(secret).sub(REDACTED, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _pattern(secret: str) -> re.Pattern[str]:
    head, short, tail = secret[:_PREFIX], secret[: _PREFIX - 2], secret[-_SUFFIX:]
    return re.compile(
        "|".join(
            [
                rf"{re.escape(head)}{_CRED}*",
                rf"{re.escape(short)}{_CRED}*?{_MASKED}{_CRED}*",
                rf"{_LEAD}*{_MASKED}{_CRED}*?{re.escape(tail)}{_END}",
            ]
        )
    )


def configured_secrets(env: Mapping[str, str]) -> list[str]:
    """The values of ``env``'s credential variables (names ending in ``_KEY``, ``_APIKEY``,
    ``_TOKEN``, ``_SECRET``, ``_PASSWORD`` or ``_CREDENTIALS``), at least eight characters.

    Values that name a file or a URL (``GOOGLE_APPLICATION_CREDENTIALS=/etc/creds.json``) or hold
    spaces are not credentials themselves: masking them would hide paths in every error."""
    return [
        v
        for k, v in env.items()
        if _SECRET_NAME.search(k) and len(v) >= 8 and not _NOT_A_KEY.search(v)
    ]
