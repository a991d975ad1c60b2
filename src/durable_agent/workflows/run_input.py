"""Reading a run workflow's input: the client's wire form, or what an operator types.

The run workflow takes its input as a raw payload and decodes it here, so that no input problem
can fail the workflow *task* (which Temporal retries forever, leaving the run Running and silent):
anything wrong raises :class:`InvalidRunInputError`, naming the field, and the workflow fails at
once with a non-retryable ``ApplicationError`` of type ``InvalidRunInput``, before it stores or
schedules anything (issue 11 item 9).

Besides the client's form (:class:`RunInput`, each input an encoded entry), the Temporal UI's
Start Workflow form can be filled in by hand (issue 11 item 10)::

    {"session_id": "user-42", "agent": "assistant", "text": "hi"}

``run_id`` may be left out (the run derives it from the workflow ID), ``text`` is one user message
(after any ``inputs``), and each ``inputs`` item may be a plain message object without ID or times,
``{"role": "user", "content": "hi"}`` (``content`` a string or a list of blocks), which the run
stamps with its clock. Unknown top-level fields are refused, so a typo cannot go unnoticed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import ValidationError

from ..session.errors import SessionError
from ..session.ids import validate_session_id
from .types import RunInput

__all__ = ["INVALID_RUN_INPUT", "InvalidRunInputError", "decode_run_input", "derive_run_id"]

INVALID_RUN_INPUT = "InvalidRunInput"
"""The ``ApplicationError`` type a run with unusable input fails with."""

_PLAIN_OPTIONS = {"system_prompt": str, "max_turns": int, "model_options": dict}
"""The options the worker reads, and their JSON types (others are ignored, as before)."""


class InvalidRunInputError(ValueError):
    """A run input that cannot start a run; ``field`` names what is wrong (``inputs[0].wire``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid run input: {field}: {problem}" if field else problem)
        self.field = field


def decode_run_input(value: Any) -> RunInput:
    """A :class:`RunInput` from the decoded JSON payload, or :class:`InvalidRunInputError`."""
    if not isinstance(value, dict):
        raise InvalidRunInputError(
            "", f"invalid run input: expected a JSON object, got {_json_type(value)}"
        )
    unknown = sorted(set(value) - set(RunInput.model_fields) - {"text"})
    if unknown:
        raise InvalidRunInputError(unknown[0], "unknown field")
    data, plain = _normalized(value)
    try:
        inp = RunInput.model_validate(data)
    except ValidationError as exc:
        field, problem = _first_error(exc, plain)
        raise InvalidRunInputError(field, problem) from None
    try:
        validate_session_id(inp.session_id)
    except SessionError as exc:
        raise InvalidRunInputError("session_id", str(exc)) from None
    if not inp.agent:
        raise InvalidRunInputError("agent", "must name an agent registered on the worker")
    for key, kind in _PLAIN_OPTIONS.items():
        option = inp.options.get(key)
        if option is not None and (not isinstance(option, kind) or isinstance(option, bool)):
            expected = {str: "a string", int: "an integer", dict: "an object"}[kind]
            raise InvalidRunInputError(f"options.{key}", f"must be {expected}")
    for i, item in enumerate(inp.inputs):
        if item.message is None:
            try:
                item.entry(i)
            except ValueError as exc:  # EntryDecodeError: the wire is not an entry
                raise InvalidRunInputError(f"inputs[{i}].wire", str(exc)) from None
    return inp


def derive_run_id(workflow_id: str, session_id: str) -> str:
    """The run ID of an input that gave none: the tail of a ``durable-agent/<session>/run/<id>``
    workflow ID, else 16 hex characters of the workflow ID's SHA-256 (stable across replays)."""
    prefix = f"durable-agent/{session_id}/run/"
    if workflow_id.startswith(prefix) and len(workflow_id) > len(prefix):
        return workflow_id[len(prefix) :]
    return hashlib.sha256(workflow_id.encode()).hexdigest()[:16]


def _normalized(value: dict[str, Any]) -> tuple[dict[str, Any], set[int]]:
    """``value`` with ``text`` and plain message items in the model's shape, and the indexes
    of the plain items (their errors are named as the operator wrote them)."""
    data = dict(value)
    inputs = data.get("inputs", [])
    if not isinstance(inputs, list):
        return data, set()
    items: list[Any] = list(inputs)
    if "text" in data:
        text = data.pop("text")
        if not isinstance(text, str):
            raise InvalidRunInputError("text", f"must be a string, not {_json_type(text)}")
        items.append({"role": "user", "content": text})
    plain: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, dict) and "role" in item and "wire" not in item:
            message = dict(item)
            if isinstance(message.get("content"), str):
                message["content"] = [{"type": "text", "text": message["content"]}]
            items[i] = {"message": message}
            plain.add(i)
    data["inputs"] = items
    return data, plain


def _first_error(exc: ValidationError, plain: set[int]) -> tuple[str, str]:
    error = exc.errors(include_url=False)[0]
    loc = list(error["loc"])
    if len(loc) >= 3 and loc[0] == "inputs" and loc[1] in plain and loc[2] == "message":
        del loc[2]  # the operator wrote the message itself as the item
    field = ""
    for part in loc:
        if isinstance(part, int):
            field += f"[{part}]"
        else:
            field += ("." if field else "") + str(part)
    problem = str(error["msg"])
    if error["type"] == "missing":
        problem = "required"
    return field, problem


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
