"""Torn-tail detection for FileStore: is an unterminated final line a strict prefix of JSON?

A crash during an append leaves at most one partial line at the end of a session file. Telling
such a torn write (drop it) from a damaged complete line (report it) needs one question answered
quickly and exactly: could more bytes still turn this text into valid JSON?
"""

from __future__ import annotations

import codecs
import re

__all__ = ["is_json_prefix", "utf8_prefix"]

_WS = re.compile(r"[ \t\n\r]*")
_STRING_BODY = r'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+'
_STRING = re.compile(_STRING_BODY + '"')
_STRING_PREFIX = re.compile(_STRING_BODY + r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*|(?:\.[0-9]+)?[eE][+-]?[0-9]*)?)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")  # as Python's json reads
_CLOSER = {"{": "}", "[": "]"}

# What the scanner expects next.
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE, _DONE = range(7)


def _after_value(stack: list[str]) -> int:
    return _DONE if not stack else _COMMA_OR_CLOSE


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match is not None else pos


def _scan_scalar(text: str, pos: int) -> int | None:
    """End of the string, number or literal at ``pos``; -1 if it runs validly into the end of
    ``text`` (so more input could complete it); ``None`` if it is invalid."""
    c = text[pos]
    if c == '"':
        m = _STRING.match(text, pos)
        if m is not None:
            return m.end()
        return -1 if _STRING_PREFIX.fullmatch(text, pos) else None
    left = len(text) - pos
    for literal in _LITERALS:
        if text.startswith(literal, pos):
            return pos + len(literal)
        if left < len(literal) and literal.startswith(text[pos:]):
            return -1
    if c == "-" or "0" <= c <= "9":
        if _NUMBER_PREFIX.fullmatch(text, pos):
            return -1
        m = _NUMBER.match(text, pos)
        return m.end() if m is not None else None
    return None


def is_json_prefix(text: str) -> bool:
    """True if ``text`` is a strict prefix of a JSON value: what a torn write of one leaves behind.

    A complete value, trailing data after one, or anything no continuation could make valid is
    not a prefix. The empty string (or only whitespace) is a prefix. Runs in linear time: string
    bodies are skipped by possessive regexes, so a 512 KiB torn line is cheap to classify.
    """
    stack: list[str] = []
    expect = _VALUE
    pos, n = 0, len(text)
    while True:
        pos = _skip_ws(text, pos)
        if pos == n:
            return expect != _DONE
        c = text[pos]
        if expect == _DONE:
            return False
        if expect == _COLON:
            if c != ":":
                return False
            pos, expect = pos + 1, _VALUE
            continue
        closes = expect in (_VALUE_OR_CLOSE, _KEY_OR_CLOSE, _COMMA_OR_CLOSE)
        if closes and stack and c == _CLOSER[stack[-1]]:
            stack.pop()
            pos, expect = pos + 1, _after_value(stack)
            continue
        if expect == _COMMA_OR_CLOSE:
            if c != ",":
                return False
            pos, expect = pos + 1, (_KEY if stack[-1] == "{" else _VALUE)
            continue
        if expect in (_KEY, _KEY_OR_CLOSE) and c != '"':
            return False
        if c in _CLOSER:
            stack.append(c)
            pos, expect = pos + 1, (_KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE)
            continue
        end = _scan_scalar(text, pos)
        if end is None:
            return False
        if end == -1:
            return True
        is_key = expect in (_KEY, _KEY_OR_CLOSE)
        pos, expect = end, (_COLON if is_key else _after_value(stack))


def utf8_prefix(data: bytes) -> str | None:
    """Decode ``data`` that may end in the middle of a UTF-8 sequence; ``None`` if it is invalid.

    A cut multi-byte character is replaced by a stand-in non-ASCII letter, which keeps the JSON
    prefix question honest: non-ASCII text is only valid inside a string.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    pending, _ = decoder.getstate()
    return text + "\u00e9" if pending else text
