"""Secret redaction: no configured credential, whole, masked or cut short, leaves in a message.

Provider error bodies echo the key they rejected, in full or masked but still identifying
(OpenAI's ``sk-abc1****wxyz``, an OpenAI-compatible server's ``gsk_b72f0b********Yodd``). Error
text travels into workflow history, logs and CLI output, so :func:`redact` masks, for every
secret it is given:

- the exact value;
- any run of twelve or more of its characters, raw, base64-encoded (at any byte alignment, so
  an ``Authorization`` header echoed in base64 is caught) or URL-encoded: the key without its
  ``sk-`` prefix, a slice from its middle;
- the value's first eight characters (or first six right before a mask run like ``****``) and
  whatever credential characters follow: a truncated or masked copy;
- a mask run followed by the value's last four characters (``********Yodd``).

On top of that it masks what merely looks like a key (``sk-…``, ``Bearer …``, ``api_key=…``), for
secrets nobody passed. :func:`configured_secrets` lists the credentials an environment holds
(``*_KEY``, ``*_TOKEN``, ``*_SECRET``, …), for callers that only know the environment (the
worker's error path, the CLI).
"""

from __future__ import annotations

import base64
import bisect
import re
import urllib.parse
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
_TOKEN_START = rf"(?<![A-Za-z0-9_\-+/{re.escape(_MASK)}])"
"""Not inside a run of key or mask characters (``=`` may precede: ``key=****Yodd``)."""
_MASKED = rf"[{re.escape(_MASK)}]{{3,}}"

_PREFIX = 8
"""Leading characters of a key that identify it (``gsk_b72f``); six before a mask run."""
_SUFFIX = 4
"""Trailing characters shown after a mask run (``****Yodd``)."""
_FUZZY_MIN = 12
"""Shorter secrets are only masked whole: their prefixes could be ordinary words. Also the
shortest run of a secret's characters that is masked wherever it appears."""

_NOT_A_KEY = re.compile(r"^[/.~]|^[A-Za-z]:\\|://|\s")
_SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:api)?(?:key|token|secret|password|passwd|credential)s?$")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` without the given secrets (whole, in runs, encoded, prefix-cut or masked) or
    anything shaped like a key or bearer token."""
    ordered = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
    for secret in ordered:
        text = text.replace(secret, REDACTED)
    fuzzy = [secret for secret in ordered if len(secret) >= _FUZZY_MIN]
    text = _mask_runs(text, [form for secret in fuzzy for form in _forms(secret)])
    for secret in fuzzy:
        text = _pattern(secret).sub(REDACTED, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _forms(secret: str) -> list[tuple[str, bool]]:
    """``secret`` as text may carry it: raw, URL-encoded, and base64 (standard and URL-safe) at
    each of the three byte alignments, each base64 form cut to the characters that depend on
    the secret alone (the first and last groups also encode the bytes around it). Each form
    says whether a match grows over the base64 characters around it: those groups encode the
    secret's ends, or the header it was sent in."""
    raw = secret.encode("utf-8")
    forms = {secret: False, urllib.parse.quote(secret, safe=""): False}
    forms.setdefault(urllib.parse.quote_plus(secret), False)
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode("ascii")[4 if pad else 0 : -4]
        forms.setdefault(encoded, True)
        forms.setdefault(encoded.replace("+", "-").replace("/", "_"), True)
    return [(form, grow) for form, grow in forms.items() if len(form) >= _FUZZY_MIN]


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=_\-]+")


def _mask_runs(text: str, forms: list[tuple[str, bool]]) -> str:
    """``text`` with every run of ``_FUZZY_MIN`` or more characters of any of ``forms`` masked.

    A run that long always holds a ``_FUZZY_MIN // 2``-character piece starting at a multiple
    of that length, so only those pieces are looked up (one dictionary probe per piece, linear
    in ``text`` whatever the number of forms), then each hit is grown to its whole run.
    """
    step = _FUZZY_MIN // 2
    pieces: dict[str, list[tuple[str, int, bool]]] = {}
    for form, grow in forms:
        for j in range(len(form) - step + 1):
            pieces.setdefault(form[j : j + step], []).append((form, j, grow))
    spans: list[tuple[int, int]] = []
    tokens: list[tuple[int, int]] | None = None  # the runs of base64 characters, when needed
    for p in range(0, len(text) - step + 1, step):
        for form, j, grow in pieces.get(text[p : p + step], ()):
            start, end, before, after = p, p + step, j, j + step
            while start and before and text[start - 1] == form[before - 1]:
                start, before = start - 1, before - 1
            while end < len(text) and after < len(form) and text[end] == form[after]:
                end, after = end + 1, after + 1
            if end - start < _FUZZY_MIN:
                continue
            if grow:  # to the whole base64 token around it
                if tokens is None:
                    tokens = [m.span() for m in _BASE64_RUN.finditer(text)]
                start = tokens[bisect.bisect_right(tokens, (start, len(text))) - 1][0]
                end = tokens[bisect.bisect_right(tokens, (end - 1, len(text))) - 1][1]
            spans.append((start, end))
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for start, end in sorted(spans):
        if start > last or not out:
            out += [text[last:start], REDACTED]
        last = max(last, end)
    return "".join(out) + text[last:]


def _pattern(secret: str) -> re.Pattern[str]:
    head, short, tail = secret[:_PREFIX], secret[: _PREFIX - 2], secret[-_SUFFIX:]
    return re.compile(
        "|".join(
            [
                rf"{re.escape(head)}{_CRED}*",
                rf"{re.escape(short)}{_CRED}*?{_MASKED}{_CRED}*",
                # Linear time on any text: tried from the start of a token only, and with no
                # backtracking into the leading run or the mask run (tried everywhere and
                # given back one character at a time, they made a line of 2,000 ``*`` cost
                # seconds).
                rf"{_TOKEN_START}{_LEAD}*+{_MASKED}+{_CRED}{{0,{_SUFFIX}}}?{re.escape(tail)}{_END}",
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
